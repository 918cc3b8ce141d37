// RoPE checks beyond the op table: known values, the inverse rotation,
// offset vs explicit positions, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "trident/ops/rope.h"

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
  auto back = ops::rope_backward(ops::rope(x, 17, 500.0), 17, 500.0).to_vector<double>();
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
  expect_error([] { ops::rope(Tensor::zeros({1, 2, 3, 4}), Tensor::zeros({3}, DType::i64)); },
               {"rope", "positions", "[3]", "[2]"});
  expect_error([] { ops::rope(Tensor::zeros({1, 2, 3, 4}), Tensor::zeros({2}, DType::f32)); },
               {"rope", "positions", "f32"});
  expect_error([] { ops::rope_backward(Tensor::zeros({1, 2, 3, 7}), 0); }, {"rope_backward", "[1, 2, 3, 7]"});
}

}  // namespace
}  // namespace trident
