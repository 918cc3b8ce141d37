// Softmax kernel checks beyond the op table: the shared f32 exp against
// std::exp, long rows vs a naive f64 softmax, thread-count invariance, extreme
// logits, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "trident/core/parallel.h"
#include "trident/kernels/cpu/softmax.h"
#include "trident/ops/softmax.h"

namespace trident {
namespace {

TEST(SoftmaxKernel, ExpF32IsAccurateAndHandlesSpecialValues) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.001953125f) {
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(kernels::cpu::exp_f32(x) - ref) / ref);
  }
  EXPECT_LT(worst, 3e-7);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(kernels::cpu::exp_f32(-inf), 0.0f);
  EXPECT_EQ(kernels::cpu::exp_f32(-100.0f), 0.0f);
  EXPECT_EQ(kernels::cpu::exp_f32(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(kernels::cpu::exp_f32(std::numeric_limits<float>::quiet_NaN())));
}

#ifdef __AVX512F__
TEST(SoftmaxKernel, VectorExpMatchesScalarAccuracy) {
  double worst = 0;
  alignas(64) float x[16], y[16];
  for (float base = -87.0f; base <= 88.0f; base += 16 * 0.001953125f) {
    for (int i = 0; i < 16; ++i) x[i] = base + static_cast<float>(i) * 0.001953125f;
    _mm512_store_ps(y, kernels::cpu::exp_f32x16(_mm512_load_ps(x)));
    for (int i = 0; i < 16; ++i) {
      if (x[i] > 88.0f) continue;  // saturates by contract
      const double ref = std::exp(static_cast<double>(x[i]));
      worst = std::max(worst, std::fabs(y[i] - ref) / ref);
    }
  }
  EXPECT_LT(worst, 3e-7);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float special[16] = {-inf, -100.0f, 0.0f, nan, -87.2f, 1.0f, -1.0f, 0.5f, 0, 0, 0, 0, 0, 0, 0, 0};
  std::copy(special, special + 16, x);
  _mm512_store_ps(y, kernels::cpu::exp_f32x16(_mm512_load_ps(x)));
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 1.0f);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_GT(y[4], 0.0f);
}
#endif

Tensor random_rows(std::int64_t rows, std::int64_t cols, double range, DType dtype) {
  std::mt19937_64 gen(static_cast<std::uint64_t>(rows * 1000 + cols));
  std::uniform_real_distribution<double> dist(-range, range);
  Tensor t = Tensor::empty({rows, cols}, DType::f64);
  for (double& x : t.span<double>()) x = dist(gen);
  return t.to(dtype);
}

TEST(SoftmaxKernel, LongRowsMatchNaiveAndSumToOne) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor x = random_rows(37, 1031, 20.0, dtype);
    auto y = ops::softmax(x).to(DType::f64).to_vector<double>();
    auto xv = x.to(DType::f64).to_vector<double>();
    for (std::size_t r = 0; r < 37; ++r) {
      double mx = -1e300, sum = 0, ysum = 0, err = 0, norm = 0;
      for (std::size_t c = 0; c < 1031; ++c) mx = std::max(mx, xv[r * 1031 + c]);
      for (std::size_t c = 0; c < 1031; ++c) sum += std::exp(xv[r * 1031 + c] - mx);
      for (std::size_t c = 0; c < 1031; ++c) {
        const double ref = std::exp(xv[r * 1031 + c] - mx) / sum;
        err += (y[r * 1031 + c] - ref) * (y[r * 1031 + c] - ref);
        norm += ref * ref;
        ysum += y[r * 1031 + c];
      }
      const double tol = dtype == DType::f32 ? 3e-6 : 1e-2;  // f32: x − max rounds to ~ulp(20)
      EXPECT_LE(std::sqrt(err / norm), tol) << "row " << r << " " << dtype_name(dtype);
      EXPECT_NEAR(ysum, 1.0, dtype == DType::f32 ? 1e-5 : 2e-2);
    }
  }
}

TEST(SoftmaxKernel, HugeLogitsDoNotOverflow) {
  Tensor x = Tensor::from_vector<float>({1e30f, 1e30f, -1e30f, 3e38f, 0.0f, -3e38f}, {2, 3});
  auto y = ops::softmax(x).to_vector<float>();
  EXPECT_FLOAT_EQ(y[0], 0.5f);
  EXPECT_FLOAT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 1.0f);
  EXPECT_EQ(y[4], 0.0f);
}

TEST(SoftmaxKernel, ResultsDoNotDependOnThreadCount) {
  Tensor x = random_rows(256, 700, 5.0, DType::f32);
  Tensor dy = random_rows(256, 700, 1.0, DType::f32);
  const int saved = num_threads();
  std::vector<float> y[2], dx[2];
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Tensor out = ops::softmax(x);
    y[threads - 1] = out.to_vector<float>();
    dx[threads - 1] = ops::softmax_backward(out, dy).to_vector<float>();
  }
  set_num_threads(saved);
  EXPECT_EQ(y[0], y[1]);
  EXPECT_EQ(dx[0], dx[1]);
}

TEST(SoftmaxKernel, BadArgumentsNameTheOpAndShapes) {
  try {
    ops::softmax_backward(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("softmax_backward"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("[2, 3]"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("[3, 2]"), std::string::npos) << e.message();
  }
  try {
    ops::softmax(Tensor::zeros({4, 2}, DType::i64));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("softmax"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("[4, 2]"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace trident
