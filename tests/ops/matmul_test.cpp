// Kernel-level tests of the matmul family: the two backends against each other
// and a naive f64 product at odd shapes, alpha/beta accumulation, bf16 inputs
// with f32 output, the backend switch, thread-count invariance, error messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <thread>

#include "trident/core/parallel.h"
#include "trident/kernels/cpu/matmul.h"
#include "trident/ops/matmul.h"

namespace trident {
namespace {

namespace kc = kernels::cpu;
using ::testing::HasSubstr;

Tensor random(Shape shape, DType dtype, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor t = Tensor::empty(std::move(shape), DType::f64);
  for (double& x : t.span<double>()) x = dist(gen);
  return t.to(dtype);
}

// Naive f64 product of one 2-D pair or equal-batch stacks (no broadcasting).
std::vector<double> naive(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  const std::int64_t ar = a.size(-2), ac = a.size(-1), br = b.size(-2), bc = b.size(-1);
  const std::int64_t batch = a.shape().outer(a.rank() - 2);
  const std::int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
  std::vector<double> out;
  for (std::int64_t p = 0; p < batch; ++p) {
    const double* A = av.data() + p * ar * ac;
    const double* B = bv.data() + p * br * bc;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t q = 0; q < k; ++q) s += (ta ? A[q * ac + i] : A[i * ac + q]) * (tb ? B[j * bc + q] : B[q * bc + j]);
        out.push_back(s);
      }
    }
  }
  return out;
}

double rel_error(const std::vector<double>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

// Runs the kernel directly with a chosen backend (ops:: always takes the default).
Tensor gemm_with(kc::MatmulBackend backend, const Tensor& a, const Tensor& b, bool ta, bool tb, DType out_dtype,
                 double alpha = 1.0, double beta = 0.0, Tensor c = {}) {
  kc::GemmShape s;
  s.batch = a.shape().outer(a.rank() - 2);
  s.m = ta ? a.size(-1) : a.size(-2);
  s.k = ta ? a.size(-2) : a.size(-1);
  s.n = tb ? b.size(-2) : b.size(-1);
  s.trans_a = ta;
  s.trans_b = tb;
  std::vector<std::int64_t> dims(a.shape().begin(), a.shape().end() - 2);
  dims.push_back(s.m);
  dims.push_back(s.n);
  if (!c.defined()) c = Tensor::empty(Shape(dims), out_dtype);
  kc::gemm(a.dtype(), c.dtype(), s, alpha, a.raw_data(), b.raw_data(), beta, c.raw_data(), backend);
  return c;
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      ::unsetenv(name_);
    } else {
      ::setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : old_(num_threads()) { set_num_threads(n); }
  ~ScopedThreads() { set_num_threads(old_); }

 private:
  int old_;
};

TEST(MatmulKernel, BackendsAgreeWithNaiveAtOddShapes) {
  const std::int64_t m = 37, k = 53, n = 29;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = random(ta ? Shape{3, k, m} : Shape{3, m, k}, DType::f32, 1);
      const Tensor b = random(tb ? Shape{3, n, k} : Shape{3, k, n}, DType::f32, 2);
      const auto ref = naive(a, b, ta, tb);
      const auto dnnl = gemm_with(kc::MatmulBackend::onednn, a, b, ta, tb, DType::f32).to_vector<double>();
      const auto blas = gemm_with(kc::MatmulBackend::openblas, a, b, ta, tb, DType::f32).to_vector<double>();
      EXPECT_LT(rel_error(dnnl, ref), 1e-6) << "onednn ta=" << ta << " tb=" << tb;
      EXPECT_LT(rel_error(blas, ref), 1e-6) << "openblas ta=" << ta << " tb=" << tb;
      EXPECT_LT(rel_error(dnnl, blas), 1e-6) << "ta=" << ta << " tb=" << tb;
      const Tensor a64 = a.to(DType::f64), b64 = b.to(DType::f64);
      EXPECT_LT(rel_error(gemm_with(kc::MatmulBackend::openblas, a64, b64, ta, tb, DType::f64).to_vector<double>(), ref),
                1e-14);
    }
  }
}

TEST(MatmulKernel, AlphaBetaAccumulateOnBothBackends) {
  const Tensor a = random({19, 23}, DType::f32, 3), b = random({23, 11}, DType::f32, 4);
  const Tensor c0 = random({19, 11}, DType::f32, 5);
  const auto ab = naive(a, b, false, false);
  const auto c0v = c0.to_vector<double>();
  for (auto backend : {kc::MatmulBackend::onednn, kc::MatmulBackend::openblas}) {
    for (auto [alpha, beta] : {std::pair{1.0, 1.0}, std::pair{0.5, 1.0}, std::pair{-2.0, 0.25}, std::pair{3.0, 0.0}}) {
      Tensor c = c0.clone();
      gemm_with(backend, a, b, false, false, DType::f32, alpha, beta, c);
      std::vector<double> expected(ab.size());
      for (std::size_t i = 0; i < ab.size(); ++i) expected[i] = alpha * ab[i] + beta * c0v[i];
      EXPECT_LT(rel_error(c.to_vector<double>(), expected), 1e-6)
          << kc::matmul_backend_name(backend) << " alpha=" << alpha << " beta=" << beta;
    }
  }
}

TEST(MatmulKernel, BetaZeroIgnoresGarbageInOutput) {
  const Tensor a = random({8, 9}, DType::f32, 6), b = random({9, 7}, DType::f32, 7);
  for (auto backend : {kc::MatmulBackend::onednn, kc::MatmulBackend::openblas}) {
    Tensor c = Tensor::full({8, 7}, std::numeric_limits<double>::quiet_NaN());
    gemm_with(backend, a, b, false, false, DType::f32, 1.0, 0.0, c);
    EXPECT_LT(rel_error(c.to_vector<double>(), naive(a, b, false, false)), 1e-6) << kc::matmul_backend_name(backend);
  }
}

TEST(MatmulKernel, Bf16InputsWithF32OutputAccumulateWithoutRounding) {
  const Tensor a = random({4, 33, 70}, DType::bf16, 8), b = random({4, 70, 41}, DType::bf16, 9);
  const auto ref = naive(a, b, false, false);  // exact products of the bf16 inputs
  Tensor out32 = Tensor::empty({4, 33, 41}, DType::f32);
  ops::matmul_into(a, b, out32, false, false);
  const Tensor out16 = ops::matmul(a, b);
  EXPECT_EQ(out16.dtype(), DType::bf16);
  const double err32 = rel_error(out32.to_vector<double>(), ref);
  const double err16 = rel_error(out16.to_vector<double>(), ref);
  EXPECT_LT(err32, 1e-6);   // f32 accumulation, no output rounding
  EXPECT_LT(err16, 5e-3);   // one bf16 rounding of the result
  EXPECT_GT(err16, 10 * err32);
  // Accumulating into an f32 gradient buffer.
  Tensor acc = out32.clone();
  ops::matmul_into(a, b, acc, false, false, 1.0, 1.0);
  std::vector<double> twice(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) twice[i] = 2 * ref[i];
  EXPECT_LT(rel_error(acc.to_vector<double>(), twice), 1e-6);
}

TEST(MatmulKernel, BackendSelectedByEnvironment) {
  {
    ScopedEnv env("TRIDENT_MATMUL_BACKEND", "openblas");
    EXPECT_EQ(kc::matmul_backend(DType::f32), kc::MatmulBackend::openblas);
    EXPECT_EQ(kc::matmul_backend(DType::bf16), kc::MatmulBackend::onednn);  // OpenBLAS has no bf16 -> bf16 GEMM
    EXPECT_THAT(kc::matmul_backend_description(), HasSubstr("(f32, f64: "));
    const Tensor a = random({5, 6}, DType::f32, 10), b = random({6, 7}, DType::f32, 11);
    EXPECT_LT(rel_error(ops::matmul(a, b).to_vector<double>(), naive(a, b, false, false)), 1e-6);
  }
  {
    ScopedEnv env("TRIDENT_MATMUL_BACKEND", "onednn");
    EXPECT_EQ(kc::matmul_backend(DType::f32), kc::MatmulBackend::onednn);
    EXPECT_EQ(kc::matmul_backend(DType::f64), kc::MatmulBackend::openblas);  // oneDNN has no f64 GEMM
    EXPECT_THAT(kc::matmul_backend_description(), HasSubstr("(f32, bf16"));
  }
  {
    ScopedEnv env("TRIDENT_MATMUL_BACKEND", "mkl");
    EXPECT_THAT([] { kc::matmul_backend(DType::f32); },
                ::testing::ThrowsMessage<Error>(HasSubstr("TRIDENT_MATMUL_BACKEND='mkl' is not a matmul backend")));
  }
}

TEST(MatmulKernel, DescriptionNamesLibrariesAndIsa) {
  const std::string d = kc::matmul_backend_description();
  EXPECT_THAT(d, HasSubstr("oneDNN 2."));
  EXPECT_THAT(d, HasSubstr("OpenBLAS"));
  EXPECT_THAT(d, HasSubstr("bf16: avx"));
}

// trident's layouts must train the same model whatever the thread count, so a
// GEMM may not split its K sum across threads. Shapes include the weight
// gradient's (small M, N; K = all tokens), where libraries like to split K.
TEST(MatmulKernel, ResultDoesNotDependOnThreadCount) {
  struct Case {
    std::int64_t m, k, n;
    bool ta, tb;
  };
  for (const Case& c : {Case{64, 768, 96, false, false}, Case{96, 4096, 80, true, false}, Case{48, 3000, 40, false, true},
                        Case{16, 30000, 16, true, false}}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      for (auto backend : {kc::MatmulBackend::onednn, kc::MatmulBackend::openblas}) {
        if (dtype == DType::bf16 && backend == kc::MatmulBackend::openblas) continue;
        const Tensor a = random(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, dtype, 12);
        const Tensor b = random(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, dtype, 13);
        std::vector<float> first;
        for (int threads : {1, 2, 3, 4}) {
          ScopedThreads scoped(threads);
          const auto out = gemm_with(backend, a, b, c.ta, c.tb, DType::f32).to_vector<float>();
          if (first.empty()) {
            first = out;
          } else {
            EXPECT_EQ(out, first) << kc::matmul_backend_name(backend) << " " << dtype_name(dtype) << " " << c.m << "x"
                                  << c.k << "x" << c.n << " with " << threads << " threads";
          }
        }
      }
    }
  }
}

// Primitives are cached and shared; scratchpads are per thread: GEMMs issued
// from several threads at once give the serial results.
TEST(MatmulKernel, ConcurrentCallsFromSeveralThreads) {
  const Tensor a = random({96, 200}, DType::bf16, 20), b = random({200, 160}, DType::bf16, 21);
  const Tensor a2 = random({64, 120}, DType::f32, 22), b2 = random({120, 72}, DType::f32, 23);
  const auto expected_bf16 = ops::matmul(a, b).to_vector<float>();
  const auto expected_f32 = ops::matmul(a2, b2).to_vector<float>();
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        const bool use_bf16 = (t + rep) % 2 == 0;
        const auto out = use_bf16 ? ops::matmul(a, b).to_vector<float>() : ops::matmul(a2, b2).to_vector<float>();
        if (out != (use_bf16 ? expected_bf16 : expected_f32)) ++mismatches;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(MatmulOp, BroadcastOperandsMatchPerBatchProducts) {
  const Tensor a = random({2, 3, 5, 4}, DType::f32, 14), w = random({6, 4}, DType::f32, 15);
  const Tensor y = ops::matmul(a, w, false, true);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 5, 6}));
  for (std::int64_t i = 0; i < 2; ++i) {
    const Tensor yi = ops::matmul(a.select0(i), w, false, true);  // [3, 5, 6]
    EXPECT_EQ(yi.to_vector<float>(), y.select0(i).to_vector<float>());
  }
  const Tensor at = random({3, 4, 5}, DType::f32, 16);
  const Tensor shared_a = ops::matmul(w, at);  // [6, 4] · [3, 4, 5] -> [3, 6, 5]
  ASSERT_EQ(shared_a.shape(), (Shape{3, 6, 5}));
  for (std::int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ops::matmul(w, at.select0(i)).to_vector<float>(), shared_a.select0(i).to_vector<float>());
  }
}

TEST(MatmulOp, LinearAddsBiasWithOneRounding) {
  const Tensor x = random({3, 4, 24}, DType::bf16, 17), w = random({10, 24}, DType::bf16, 18);
  const Tensor bias = random({10}, DType::bf16, 19);
  const Tensor y = ops::linear(x, w, bias);
  ASSERT_EQ(y.shape(), (Shape{3, 4, 10}));
  auto ref = naive(x.view({12, 24}), w, false, true);
  const auto bv = bias.to_vector<double>();
  for (std::size_t i = 0; i < ref.size(); ++i) ref[i] += bv[i % 10];
  // Exactly the bf16 rounding of the f32-accumulated value, so at most half an ulp (2^-9 relative) per element.
  const auto yv = y.to_vector<double>();
  for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(yv[i], ref[i], std::fabs(ref[i]) * 0x1p-8 + 1e-6) << i;
}

// No f16 GEMM on this CPU: f16 operands are widened exactly to f32 and the
// result is rounded once to f16.
TEST(MatmulOp, F16GoesThroughF32WithOneRounding) {
  const Tensor a = random({2, 9, 31}, DType::f16, 24), b = random({31, 13}, DType::f16, 25);
  const Tensor y = ops::matmul(a, b);
  ASSERT_EQ(y.dtype(), DType::f16);
  const Tensor expected = ops::matmul(a.to(DType::f32), b.to(DType::f32)).to(DType::f16);
  EXPECT_EQ(y.to_vector<float>(), expected.to_vector<float>());
}

TEST(MatmulOp, ZeroSizedDimensions) {
  const Tensor a = Tensor::empty({3, 0}, DType::f32), b = Tensor::empty({0, 4}, DType::f32);
  const Tensor c = ops::matmul(a, b);
  ASSERT_EQ(c.shape(), (Shape{3, 4}));
  for (float v : c.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(ops::matmul(Tensor::empty({0, 5}), Tensor::empty({5, 2})).shape(), (Shape{0, 2}));
}

TEST(MatmulOp, ErrorsNameTheOpAndShapes) {
  auto f32 = [](Shape s) { return Tensor::zeros(std::move(s)); };
  auto throws = [](auto&& f, const std::string& text) {
    EXPECT_THAT(f, ::testing::ThrowsMessage<Error>(HasSubstr(text))) << text;
  };
  throws([&] { ops::matmul(f32({4, 3}), f32({5, 6})); },
         "matmul: inner dimensions differ: a [4, 3] (K=3) vs b [5, 6] (K=5)");
  throws([&] { ops::matmul(f32({4, 3}), f32({6, 5}), false, true); },
         "matmul: inner dimensions differ: a [4, 3] (K=3) vs b [6, 5] (K=5) (trans_a=false, trans_b=true)");
  throws([&] { ops::matmul(f32({2, 4, 3}), f32({3, 3, 5})); },
         "matmul: batch dimensions differ: a [2, 4, 3] vs b [3, 3, 5]");
  throws([&] { ops::matmul(f32({3}), f32({3, 5})); }, "matmul: operands must have at least 2 dimensions, got a [3] and b [3, 5]");
  throws([&] { ops::matmul(f32({2, 3}), Tensor::zeros({3, 5}, DType::f64)); },
         "matmul: dtypes differ: a [2, 3] is f32 but b [3, 5] is f64");
  throws([&] { ops::matmul(Tensor::zeros({2, 3}, DType::i32), Tensor::zeros({3, 5}, DType::i32)); },
         "matmul: unsupported dtype i32 for a [2, 3] and b [3, 5] (expected f32, f64, bf16 or f16)");
  Tensor out = f32({2, 6});
  throws([&] { ops::matmul_into(f32({2, 3}), f32({3, 5}), out); },
         "matmul_into: out has shape [2, 6] but a [2, 3] times b [3, 5] gives [2, 5]");
  Tensor out64 = Tensor::zeros({2, 5}, DType::f64);
  throws([&] { ops::matmul_into(f32({2, 3}), f32({3, 5}), out64); }, "matmul_into: out [2, 5] is f64 but a [2, 3] and b [3, 5] are f32");
  Tensor out_bf16 = Tensor::zeros({2, 5}, DType::bf16);
  throws([&] { ops::matmul_into(Tensor::zeros({2, 3}, DType::f16), Tensor::zeros({3, 5}, DType::f16), out_bf16); },
         "matmul_into: out [2, 5] is bf16 but a [2, 3] and b [3, 5] are f16 (out must be f16 or f32)");
  Tensor square = f32({4, 4});
  throws([&] { ops::matmul_into(square, f32({4, 4}), square); }, "matmul_into: out [4, 4] overlaps an input");
  throws([&] { ops::linear(f32({2, 5}), f32({4, 6})); }, "linear: x [2, 5] has 5 input features but weight [4, 6] expects 6");
  throws([&] { ops::linear(f32({2, 5}), f32({4, 5}), f32({5})); }, "linear: bias [5] does not match weight [4, 5] (expected [4])");
}

}  // namespace
}  // namespace trident
