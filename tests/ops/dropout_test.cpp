// Dropout: the mask is exactly CounterRng's, shards drop what the whole tensor
// drops at the same global positions (the layout-invariance property), backward
// regenerates the forward's mask, and bad arguments are clear errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "testing/helpers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "trident/autograd/autograd.h"
#include "trident/core/parallel.h"
#include "trident/ops/dropout.h"

namespace trident {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const CounterRng kRng(20240607, "test/dropout/layer3");

Tensor random(Shape shape, std::uint64_t seed, DType dtype = DType::f32) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor t = Tensor::empty(std::move(shape), DType::f64);
  for (double& v : t.span<double>()) {
    const double u = dist(gen);
    v = u + (u < 0 ? -0.5 : 0.5);  // never zero, so a zero output always means "dropped"
  }
  return t.to(dtype);
}

// Copies the box [r0, r0 + rows) x [c0, c0 + cols) out of a 2-D tensor.
Tensor box2d(const Tensor& t, std::int64_t r0, std::int64_t rows, std::int64_t c0, std::int64_t cols) {
  Tensor out = Tensor::empty({rows, cols}, t.dtype());
  const std::size_t es = dtype_size(t.dtype());
  for (std::int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<char*>(out.raw_data()) + static_cast<std::size_t>(r * cols) * es,
                static_cast<const char*>(t.raw_data()) + static_cast<std::size_t>((r0 + r) * t.size(1) + c0) * es,
                static_cast<std::size_t>(cols) * es);
  }
  return out;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(Dropout, MaskIsCounterRngUniformBelowP) {
  // Long rows (several 64-word Philox batches) with a length that is not a multiple of 4.
  const Tensor x = Tensor::full({7, 301}, 1.0);
  const double p = 0.37;
  const auto y = ops::dropout(x, p, kRng).to_vector<float>();
  const float kept = static_cast<float>(1.0 / (1.0 - p));
  for (std::size_t g = 0; g < y.size(); ++g) {
    ASSERT_EQ(y[g], kRng.uniform(g) < p ? 0.0f : kept) << "global index " << g;
  }
}

TEST(Dropout, DropRateIsP) {
  const Tensor x = Tensor::full({200000}, 1.0);
  for (double p : {0.1, 0.5, 0.9}) {
    const auto y = ops::dropout(x, p, kRng.derive(std::to_string(p))).to_vector<float>();
    const double dropped = static_cast<double>(std::count(y.begin(), y.end(), 0.0f)) / static_cast<double>(y.size());
    EXPECT_NEAR(dropped, p, 5 * std::sqrt(p * (1 - p) / static_cast<double>(y.size()))) << "p = " << p;
  }
}

TEST(Dropout, ShardsDropWhatTheWholeTensorDrops) {
  // The layout-invariance property: dropout of a shard with its GlobalSlice equals
  // the same region of the dropout of the whole tensor, bit for bit.
  const std::int64_t rows = 12, cols = 130;
  const Tensor whole = random({rows, cols}, 1);
  const Tensor full_out = ops::dropout(whole, 0.3, kRng);
  struct Box {
    std::int64_t r0, nr, c0, nc;
    const char* what;
  };
  for (const Box& b : {Box{0, 12, 0, 65, "tensor-parallel column shard 0 of 2"},
                       Box{0, 12, 65, 65, "tensor-parallel column shard 1 of 2"},
                       Box{6, 6, 0, 130, "sequence/data-parallel row shard 1 of 2"},
                       Box{3, 5, 37, 51, "interior box at odd offsets"}}) {
    const Tensor shard = box2d(whole, b.r0, b.nr, b.c0, b.nc);
    const GlobalSlice slice{Shape{rows, cols}, {b.r0, b.c0}};
    EXPECT_TRUE(bit_equal(ops::dropout(shard, 0.3, kRng, slice), box2d(full_out, b.r0, b.nr, b.c0, b.nc))) << b.what;
  }
  // A 3-D [batch, seq, hidden] activation split along the sequence and the hidden dimension.
  const Tensor act = random({3, 10, 24}, 2, DType::bf16);
  const Tensor act_out = ops::dropout(act, 0.2, kRng);
  // The region act[:, 5:9, 16:24] of a tensor.
  auto region = [](const Tensor& t) {
    Tensor out = Tensor::empty({3, 4, 8}, t.dtype());
    const auto* src = static_cast<const std::uint16_t*>(t.raw_data());
    auto* dst = static_cast<std::uint16_t*>(out.raw_data());
    for (int b = 0; b < 3; ++b)
      for (int s = 0; s < 4; ++s)
        for (int h = 0; h < 8; ++h) dst[(b * 4 + s) * 8 + h] = src[(b * 10 + 5 + s) * 24 + 16 + h];
    return out;
  };
  const Tensor part = region(act), expected = region(act_out);
  EXPECT_TRUE(bit_equal(ops::dropout(part, 0.2, kRng, GlobalSlice{Shape{3, 10, 24}, {0, 5, 16}}), expected));
}

TEST(Dropout, BackwardRegeneratesTheForwardMask) {
  const Tensor x = random({9, 77}, 4), dy = random({9, 77}, 5);
  const GlobalSlice slice{Shape{20, 100}, {4, 13}};
  const auto y = ops::dropout(x, 0.25, kRng, slice).to_vector<float>();
  const auto dx = ops::dropout_backward(dy, 0.25, kRng, slice).to_vector<float>();
  const auto dyv = dy.to_vector<float>();
  for (std::size_t i = 0; i < y.size(); ++i) {
    EXPECT_EQ(y[i] == 0.0f, dx[i] == 0.0f) << i;
    if (dx[i] != 0.0f) {
      EXPECT_EQ(dx[i], dyv[i] * static_cast<float>(1.0 / 0.75)) << i;
    }
  }
  // Through autograd: the gradient of sum(dropout(x) * w) is dropout_backward(w).
  autograd::Variable xv(x, true);
  autograd::Variable w(dy, false);
  autograd::sum(autograd::mul(autograd::dropout(xv, 0.25, kRng, slice), w)).backward();
  EXPECT_TRUE(bit_equal(xv.grad(), ops::dropout_backward(dy, 0.25, kRng, slice)));
}

TEST(Dropout, IndependentOfThreadCountAndStream) {
  const int saved = num_threads();
  const Tensor x = random({64, 512}, 6);
  set_num_threads(1);
  const Tensor one = ops::dropout(x, 0.5, kRng);
  set_num_threads(2);
  const Tensor two = ops::dropout(x, 0.5, kRng);
  set_num_threads(saved);
  EXPECT_TRUE(bit_equal(one, two));
  EXPECT_FALSE(bit_equal(one, ops::dropout(x, 0.5, kRng.derive("other"))));
}

TEST(Dropout, ZeroProbabilityReturnsTheInput) {
  const Tensor x = random({3, 4}, 7);
  EXPECT_TRUE(ops::dropout(x, 0.0, kRng).is_same(x));
  autograd::Variable v(x, true);
  EXPECT_TRUE(autograd::dropout(v, 0.0, kRng).is_same(v));
}

TEST(Dropout, ErrorsNameTheOpAndShapes) {
  const auto message = [](const std::function<void()>& f) { return testing::error_what(f); };
  const Tensor x = random({4, 6}, 8);
  EXPECT_THAT(message([&] { ops::dropout(x, 1.0, kRng); }), AllOf(HasSubstr("dropout"), HasSubstr("[0, 1)"), HasSubstr("1")));
  EXPECT_THAT(message([&] { ops::dropout(x, -0.1, kRng); }), AllOf(HasSubstr("dropout"), HasSubstr("-0.1")));
  EXPECT_THAT(message([&] { ops::dropout(x, std::nan(""), kRng); }), HasSubstr("dropout"));
  EXPECT_THAT(message([&] { ops::dropout(x, 0.1, kRng, GlobalSlice{Shape{4, 8}, {0, 3}}); }),
              AllOf(HasSubstr("dropout"), HasSubstr("[4, 6]"), HasSubstr("[4, 8]"), HasSubstr("0, 3")));
  EXPECT_THAT(message([&] { ops::dropout(x, 0.1, kRng, GlobalSlice{Shape{4, 6, 1}, {0, 0, 0}}); }),
              AllOf(HasSubstr("dropout"), HasSubstr("[4, 6, 1]"), HasSubstr("[4, 6]")));
  EXPECT_THAT(message([&] { ops::dropout_backward(x, 1.5, kRng); }), HasSubstr("dropout_backward"));
  EXPECT_THAT(message([&] { ops::dropout(Tensor::zeros({2}, DType::i32), 0.1, kRng); }),
              AllOf(HasSubstr("dropout"), HasSubstr("i32")));
}

}  // namespace
}  // namespace trident
