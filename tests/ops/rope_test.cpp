// RoPE checks beyond the op table: known values, the inverse rotation,
// offset vs explicit positions, and argument errors.
#include "trident/ops/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace trident {
namespace {

Tensor random_x(Shape shape, DType dtype = DType::f64) {
  std::mt19937_64 gen(99);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor t = Tensor::empty(std::move(shape), DType::f64);
  for (double& x : t.span<double>()) x = dist(gen);
  return t.to(dtype);
}

TEST(RopeKernel, RotatesPairsIAndIPlusHalf) {
  // D = 4: pairs (0, 2) at frequency 1 and (1, 3) at frequency theta^(-1/2) = 0.01.
  Tensor x = Tensor::from_vector<double>({1, 0, 0, 1}, {1, 1, 1, 4});
  auto y = ops::rope(x, 3).to_vector<double>();
  EXPECT_NEAR(y[0], std::cos(3.0), 1e-15);
  EXPECT_NEAR(y[2], std::sin(3.0), 1e-15);
  EXPECT_NEAR(y[1], -std::sin(0.03), 1e-15);
  EXPECT_NEAR(y[3], std::cos(0.03), 1e-15);
}

TEST(RopeKernel, BackwardIsTheInverseRotation) {
  Tensor x = random_x({2, 5, 3, 8});
  auto back = ops::rope_backward(ops::rope(x, 17, {500.0}), 17, {500.0}).to_vector<double>();
  auto xv = x.to_vector<double>();
  for (std::size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(back[i], xv[i], 1e-14);
}

TEST(RopeKernel, OffsetEqualsExplicitPositions) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor x = random_x({2, 6, 2, 16}, dtype);
    Tensor positions = Tensor::from_vector<std::int64_t>({4, 5, 6, 7, 8, 9}, {6});
    EXPECT_EQ(ops::rope(x, 4).to_vector<float>(), ops::rope(x, positions).to_vector<float>());
    EXPECT_EQ(ops::rope(x, 4).to_vector<float>(), ops::rope(x, positions.to(DType::i32)).to_vector<float>());
  }
}

TEST(RopeKernel, BadArgumentsNameTheOpAndShapes) {
  auto expect_error = [](const std::function<void()>& f, std::vector<std::string> fragments) {
    try {
      f();
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      for (const auto& s : fragments) EXPECT_NE(e.message().find(s), std::string::npos) << e.message();
    }
  };
  expect_error([] { ops::rope(Tensor::zeros({1, 2, 3, 5}), 0); }, {"rope", "even", "[1, 2, 3, 5]"});
  expect_error([] { ops::rope(Tensor::zeros({2, 3, 4}), 0); }, {"rope", "[2, 3, 4]"});
  expect_error(
      [] {
        ops::rope(Tensor::zeros({1, 2, 3, 4}), Tensor::zeros({3}, DType::i64));
      },
      {"rope", "positions", "[3]", "[2]"});
  expect_error(
      [] {
        ops::rope(Tensor::zeros({1, 2, 3, 4}), Tensor::zeros({2}, DType::f32));
      },
      {"rope", "positions", "f32"});
  expect_error([] { ops::rope_backward(Tensor::zeros({1, 2, 3, 7}), 0); }, {"rope_backward", "[1, 2, 3, 7]"});
  expect_error([] { ops::rope(Tensor::zeros({1, 2, 3, 4}), 0, {0.0}); }, {"rope", "theta 0"});
  expect_error(
      [] {
        ops::rope(Tensor::zeros({1, 2, 3, 4}), 0, {1e4, RopeScaling::linear, 0.0});
      },
      {"rope", "factor 0"});
  expect_error(
      [] {
        ops::rope(Tensor::zeros({1, 2, 3, 4}), 0, {1e4, RopeScaling::llama3, 8.0, 4.0, 1.0, 8192.0});
      },
      {"rope", "low_freq_factor < high_freq_factor", "4, 1 and 8192"});
}

// Llama 3.1's scaling, pair by pair, on numbers worked out by hand: theta 10^4 and D = 16 give
// wavelengths 2π·10^(i/2). With an original context of 256 and factors 1 (low) and 4 (high), pairs
// with wavelengths under 64 keep their frequency, those over 256 are divided by 8, and pair 3
// (wavelength 198.7) is interpolated with s = (256/198.7 − 1) / 3.
TEST(RopeKernel, Llama3ScalingKeepsHighFrequenciesAndDividesLowOnes) {
  const RopeFrequencies freq{1e4, RopeScaling::llama3, 8.0, 1.0, 4.0, 256.0};
  for (std::int64_t i = 0; i < 8; ++i) {
    const double unscaled = std::pow(10.0, -0.5 * static_cast<double>(i));
    const double s = (256.0 / (2 * M_PI / unscaled) - 1.0) / 3.0;
    const double expected = i < 3 ? unscaled : i == 3 ? (1 - s) * unscaled / 8 + s * unscaled : unscaled / 8;
    EXPECT_NEAR(freq.inv_freq(i, 16), expected, 1e-15 * unscaled) << "pair " << i;
  }
  // Pair 3 lies strictly between its kept and its divided frequency.
  EXPECT_LT(freq.inv_freq(3, 16), std::pow(10.0, -1.5) * 0.99);
  EXPECT_GT(freq.inv_freq(3, 16), std::pow(10.0, -1.5) / 8 * 1.01);
  // The rotation uses these frequencies: one pair at a time, position 5.
  Tensor x = Tensor::zeros({1, 1, 1, 16}, DType::f64);
  for (std::int64_t i = 0; i < 8; ++i) x.span<double>()[static_cast<std::size_t>(i)] = 1.0;
  const auto y = ops::rope(x, 5, freq).to_vector<double>();
  for (std::int64_t i = 0; i < 8; ++i) {
    EXPECT_NEAR(y[static_cast<std::size_t>(i)], std::cos(5 * freq.inv_freq(i, 16)), 1e-15);
    EXPECT_NEAR(y[static_cast<std::size_t>(i + 8)], std::sin(5 * freq.inv_freq(i, 16)), 1e-15);
  }
}

}  // namespace
}  // namespace trident
