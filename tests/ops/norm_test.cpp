// Kernel-level tests of LayerNorm / RMSNorm: GPT-2-sized rows against a naive
// f64 implementation, bit-identical results for any thread count, numerics at a
// large offset, bf16 statistics, and error messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/helpers.h"

#include <cmath>
#include <cstring>
#include <random>

#include "trident/autograd/autograd.h"
#include "trident/core/parallel.h"
#include "trident/ops/norm.h"

namespace trident {
namespace {

using testing::f64;
using testing::random_tensor;
using testing::rel_err;

using ::testing::AllOf;
using ::testing::HasSubstr;

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Naive f64 LayerNorm (rms = true: RMSNorm) forward and backward from the textbook formulas.
struct Naive {
  std::vector<double> y, dx, dw, db, mean, rstd;
};
Naive naive_norm(const Tensor& xt, const Tensor& wt, const Tensor& bt, const Tensor& dyt, double eps, bool rms) {
  const auto x = f64(xt), w = f64(wt), dy = f64(dyt);
  const auto b = bt.defined() ? f64(bt) : std::vector<double>(w.size(), 0.0);
  const std::size_t C = w.size(), R = x.size() / C;
  Naive n{std::vector<double>(x.size()), std::vector<double>(x.size()), std::vector<double>(C),
          std::vector<double>(C), std::vector<double>(R), std::vector<double>(R)};
  for (std::size_t r = 0; r < R; ++r) {
    const double* xr = &x[r * C];
    const double* dyr = &dy[r * C];
    double mean = 0, var = 0;
    if (!rms) {
      for (std::size_t c = 0; c < C; ++c) mean += xr[c];
      mean /= static_cast<double>(C);
    }
    for (std::size_t c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    var /= static_cast<double>(C);
    const double rs = 1.0 / std::sqrt(var + eps);
    n.mean[r] = mean;
    n.rstd[r] = rs;
    double sg = 0, sgx = 0;
    for (std::size_t c = 0; c < C; ++c) {
      const double xh = (xr[c] - mean) * rs;
      n.y[r * C + c] = xh * w[c] + b[c];
      sg += dyr[c] * w[c];
      sgx += dyr[c] * w[c] * xh;
      n.dw[c] += dyr[c] * xh;
      n.db[c] += dyr[c];
    }
    for (std::size_t c = 0; c < C; ++c) {
      const double xh = (xr[c] - mean) * rs;
      const double centred = rms ? 0.0 : sg / static_cast<double>(C);
      n.dx[r * C + c] = rs * (dyr[c] * w[c] - centred - xh * sgx / static_cast<double>(C));
    }
  }
  return n;
}

class ThreadCount : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = num_threads(); }
  void TearDown() override { set_num_threads(saved_); }
  int saved_ = 1;
};

TEST(LayerNormKernel, Gpt2SizedRowsMatchNaiveF64) {
  const Tensor x = random_tensor({300, 768}, 1, -2.0, 3.0), w = random_tensor({768}, 2, 0.5, 1.5), b = random_tensor({768}, 3);
  const Tensor dy = random_tensor({300, 768}, 4);
  const Naive n = naive_norm(x, w, b, dy, 1e-5, false);
  auto out = ops::layer_norm(x, w, b, 1e-5);
  EXPECT_LT(rel_err(f64(out.y), n.y), 1e-6);
  EXPECT_LT(rel_err(f64(out.mean), n.mean), 1e-6);
  EXPECT_LT(rel_err(f64(out.rstd), n.rstd), 1e-6);
  auto g = ops::layer_norm_backward(dy, x, w, out.mean, out.rstd);
  EXPECT_LT(rel_err(f64(g.dx), n.dx), 1e-5);
  EXPECT_LT(rel_err(f64(g.dweight), n.dw), 1e-6);
  EXPECT_LT(rel_err(f64(g.dbias), n.db), 1e-6);
}

TEST(RmsNormKernel, LlamaSizedRowsMatchNaiveF64) {
  const Tensor x = random_tensor({300, 768}, 5, -2.0, 1.0), w = random_tensor({768}, 6, 0.5, 1.5), dy = random_tensor({300, 768}, 7);
  const Naive n = naive_norm(x, w, Tensor(), dy, 1e-6, true);
  auto out = ops::rms_norm(x, w, 1e-6);
  EXPECT_LT(rel_err(f64(out.y), n.y), 1e-6);
  EXPECT_LT(rel_err(f64(out.rstd), n.rstd), 1e-6);
  auto g = ops::rms_norm_backward(dy, x, w, out.rstd);
  EXPECT_LT(rel_err(f64(g.dx), n.dx), 1e-5);
  EXPECT_LT(rel_err(f64(g.dweight), n.dw), 1e-6);
}

TEST(LayerNormKernel, Bf16ComputesInF32WithF32Statistics) {
  const Tensor x = random_tensor({37, 768}, 8, -2.0, 3.0, DType::bf16), w = random_tensor({768}, 9, 0.5, 1.5, DType::bf16);
  const Tensor b = random_tensor({768}, 10, -1.0, 1.0, DType::bf16), dy = random_tensor({37, 768}, 11, -1.0, 1.0, DType::bf16);
  auto out = ops::layer_norm(x, w, b, 1e-5);
  EXPECT_EQ(out.y.dtype(), DType::bf16);
  EXPECT_EQ(out.mean.dtype(), DType::f32);
  EXPECT_EQ(out.rstd.shape(), Shape{37});
  // Same inputs in f32, output rounded once: must equal the bf16 kernel's result bit for bit.
  auto ref = ops::layer_norm(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32), 1e-5);
  EXPECT_TRUE(bit_equal(out.y, ref.y.to(DType::bf16)));
  EXPECT_TRUE(bit_equal(out.mean, ref.mean));
  auto g = ops::layer_norm_backward(dy, x, w, out.mean, out.rstd);
  const Naive n = naive_norm(x, w, b, dy, 1e-5, false);
  EXPECT_LT(rel_err(f64(g.dx), n.dx), 1e-2);
  EXPECT_LT(rel_err(f64(g.dweight), n.dw), 1e-2);
  EXPECT_EQ(ops::layer_norm(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64)).mean.dtype(), DType::f64);
}

TEST(RmsNormKernel, Bf16NormalisesInF32AndRoundsOnce) {
  const Tensor x = random_tensor({9, 300}, 12, -3.0, 3.0, DType::bf16), w = random_tensor({300}, 13, 0.5, 1.5, DType::bf16);
  auto out = ops::rms_norm(x, w, 1e-6);
  auto ref = ops::rms_norm(x.to(DType::f32), w.to(DType::f32), 1e-6);
  EXPECT_TRUE(bit_equal(out.y, ref.y.to(DType::bf16)));
  EXPECT_TRUE(bit_equal(out.rstd, ref.rstd));
}

TEST(LayerNormKernel, LargeOffsetDoesNotCancel) {
  // x = 1000 + noise in [-1, 1): a one-pass E[x^2] - E[x]^2 in f32 would get the variance wrong by tens of percent.
  Tensor x = random_tensor({4, 512}, 14, -1.0, 1.0);
  for (float& v : x.span<float>()) v += 1000.0f;
  const Tensor w = Tensor::full({512}, 1.0), b = Tensor::zeros({512});
  auto out = ops::layer_norm(x, w, b, 0.0);
  const Naive n = naive_norm(x, w, b, Tensor::zeros({4, 512}), 0.0, false);
  EXPECT_LT(rel_err(f64(out.y), n.y), 1e-4);
}

TEST_F(ThreadCount, WeightGradientsAreBitIdenticalForAnyThreadCount) {
  // 1000 rows: 63 row blocks of 16, so threads split the blocks unevenly.
  const Tensor x = random_tensor({1000, 768}, 15, -2.0, 2.0), w = random_tensor({768}, 16, 0.5, 1.5), b = random_tensor({768}, 17);
  const Tensor dy = random_tensor({1000, 768}, 18);
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor xd = x.to(dtype), wd = w.to(dtype), bd = b.to(dtype), dyd = dy.to(dtype);
    std::vector<ops::LayerNormGrads> ln;
    std::vector<ops::RmsNormGrads> rms;
    std::vector<Tensor> ys;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      auto f = ops::layer_norm(xd, wd, bd, 1e-5);
      ln.push_back(ops::layer_norm_backward(dyd, xd, wd, f.mean, f.rstd));
      ys.push_back(f.y);
      auto fr = ops::rms_norm(xd, wd, 1e-6);
      rms.push_back(ops::rms_norm_backward(dyd, xd, wd, fr.rstd));
    }
    for (std::size_t i = 1; i < ln.size(); ++i) {
      EXPECT_TRUE(bit_equal(ys[0], ys[i])) << dtype_name(dtype) << " y, run " << i;
      EXPECT_TRUE(bit_equal(ln[0].dx, ln[i].dx)) << dtype_name(dtype) << " dx, run " << i;
      EXPECT_TRUE(bit_equal(ln[0].dweight, ln[i].dweight)) << dtype_name(dtype) << " dweight, run " << i;
      EXPECT_TRUE(bit_equal(ln[0].dbias, ln[i].dbias)) << dtype_name(dtype) << " dbias, run " << i;
      EXPECT_TRUE(bit_equal(rms[0].dweight, rms[i].dweight)) << dtype_name(dtype) << " rms dweight, run " << i;
      EXPECT_TRUE(bit_equal(rms[0].dx, rms[i].dx)) << dtype_name(dtype) << " rms dx, run " << i;
    }
  }
}

TEST(LayerNormKernel, ZeroRowsGiveZeroParameterGradients) {
  const Tensor x = Tensor::zeros({0, 5}), w = random_tensor({5}, 19), b = random_tensor({5}, 20);
  auto out = ops::layer_norm(x, w, b);
  EXPECT_EQ(out.mean.shape(), Shape{0});
  auto g = ops::layer_norm_backward(Tensor::zeros({0, 5}), x, w, out.mean, out.rstd);
  EXPECT_EQ(f64(g.dweight), std::vector<double>(5, 0.0));
}

TEST(NormAutograd, LayerNormWithoutBiasAndFrozenWeight) {
  autograd::Variable x(random_tensor({3, 6}, 21, -1.0, 1.0, DType::f64), true);
  autograd::Variable w(random_tensor({6}, 22, 0.5, 1.5, DType::f64), false);
  autograd::Variable y = autograd::layer_norm(x, w, autograd::Variable(), 1e-5);
  autograd::sum(autograd::mul(y, y)).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  // LayerNorm is invariant to shifting a row, so every row of dx sums to zero.
  const auto g = f64(x.grad());
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int c = 0; c < 6; ++c) s += g[static_cast<std::size_t>(r * 6 + c)];
    EXPECT_NEAR(s, 0.0, 1e-12);
  }
}

TEST(NormErrors, MessagesNameTheOpAndShapes) {
  const Tensor x = random_tensor({3, 5}, 23), w7 = random_tensor({7}, 24), w5 = random_tensor({5}, 25);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message([&] { ops::layer_norm(x, w7, Tensor()); }),
              AllOf(HasSubstr("layer_norm"), HasSubstr("weight"), HasSubstr("[7]"), HasSubstr("[3, 5]")));
  EXPECT_THAT(message([&] { ops::layer_norm(x, w5, w7); }),
              AllOf(HasSubstr("layer_norm"), HasSubstr("bias"), HasSubstr("[7]"), HasSubstr("[3, 5]")));
  EXPECT_THAT(message([&] { ops::layer_norm(x, w5.to(DType::bf16), Tensor()); }),
              AllOf(HasSubstr("layer_norm"), HasSubstr("bf16"), HasSubstr("f32"), HasSubstr("[5]")));
  EXPECT_THAT(message([&] { ops::layer_norm(x, w5, Tensor(), -1.0); }), AllOf(HasSubstr("layer_norm"), HasSubstr("eps")));
  EXPECT_THAT(message([&] { ops::rms_norm(x, w7); }),
              AllOf(HasSubstr("rms_norm"), HasSubstr("[7]"), HasSubstr("[3, 5]")));
  EXPECT_THAT(message([&] { ops::rms_norm(Tensor::zeros({3, 5}, DType::i32), w5); }),
              AllOf(HasSubstr("rms_norm"), HasSubstr("i32")));
  auto f = ops::layer_norm(x, w5, Tensor());
  EXPECT_THAT(message([&] { ops::layer_norm_backward(random_tensor({3, 4}, 26), x, w5, f.mean, f.rstd); }),
              AllOf(HasSubstr("layer_norm_backward"), HasSubstr("dy"), HasSubstr("[3, 4]"), HasSubstr("[3, 5]")));
  EXPECT_THAT(message([&] { ops::layer_norm_backward(x, x, w5, f.mean.to(DType::f64), f.rstd); }),
              AllOf(HasSubstr("layer_norm_backward"), HasSubstr("mean"), HasSubstr("f64")));
  EXPECT_THAT(message([&] { ops::rms_norm_backward(x, x, w5, Tensor::zeros({4})); }),
              AllOf(HasSubstr("rms_norm_backward"), HasSubstr("rstd"), HasSubstr("[4]"), HasSubstr("[3, 5]")));
}

}  // namespace
}  // namespace trident
