#include "trident/core/rng.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trident/core/tensor.h"

namespace trident {
namespace {

TEST(Philox, KnownAnswer) {
  // Known-answer vectors from the Random123 distribution (kat_vectors, philox4x32_10).
  auto r = philox4x32_10({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
  r = philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(r[0], 0x408f276du);
  EXPECT_EQ(r[1], 0x41c83b0eu);
  EXPECT_EQ(r[2], 0xa20bc7c6u);
  EXPECT_EQ(r[3], 0x6d5451fdu);
  r = philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(r[0], 0xd16cfe09u);
  EXPECT_EQ(r[1], 0x94fdccebu);
  EXPECT_EQ(r[2], 0x5001e420u);
  EXPECT_EQ(r[3], 0x24126ea1u);
}

TEST(CounterRng, UniformAndNormalMoments) {
  CounterRng rng(1234, "moments");
  double su = 0, sn = 0, sn2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double u = rng.uniform(static_cast<std::uint64_t>(i));
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u;
    double z = rng.normal(static_cast<std::uint64_t>(i));
    sn += z;
    sn2 += z * z;
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
}

TEST(CounterRng, StreamsDiffer) {
  CounterRng a(1, "transformer.h.0.attn.c_attn.weight"), b(1, "transformer.h.1.attn.c_attn.weight"), c(2, "transformer.h.0.attn.c_attn.weight");
  EXPECT_NE(a.bits(0), b.bits(0));
  EXPECT_NE(a.bits(0), c.bits(0));
  EXPECT_EQ(a.bits(5), CounterRng(1, "transformer.h.0.attn.c_attn.weight").bits(5));
  EXPECT_NE(a.derive("x").stream(), a.derive("y").stream());
}

// The layout-invariance property: any slice of a logical tensor, filled with its
// global offsets, equals the same slice of the whole tensor filled at once.
TEST(CounterRng, SliceFillEqualsWholeFill) {
  CounterRng rng(42, "weight");
  const Shape global{6, 10};
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    Tensor whole = Tensor::empty(global, dt);
    fill_normal(whole, rng, 0.0, 0.02);
    const auto w = whole.to(DType::f64).to_vector<double>();
    // Column shard (as tensor parallelism splits a weight's dim 1) and a row shard.
    for (auto [rows, cols, r0, c0] : {std::tuple{6, 5, 0, 5}, std::tuple{2, 10, 3, 0}, std::tuple{3, 4, 2, 3}}) {
      Tensor part = Tensor::empty({rows, cols}, dt);
      fill_normal(part, rng, 0.0, 0.02, GlobalSlice{global, {r0, c0}});
      const auto p = part.to(DType::f64).to_vector<double>();
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j)
          ASSERT_EQ(p[static_cast<std::size_t>(i * cols + j)], w[static_cast<std::size_t>((r0 + i) * 10 + c0 + j)]);
    }
  }
  Tensor whole = Tensor::empty({60});
  fill_uniform(whole, rng, -1, 1);
  Tensor tail = Tensor::empty({20});
  fill_uniform(tail, rng, -1, 1, GlobalSlice{{60}, {40}});
  EXPECT_EQ(tail.to_vector<float>(), whole.slice0(40, 60).to_vector<float>());
}

TEST(CounterRng, BadSliceIsAnError) {
  CounterRng rng(1, "x");
  Tensor part = Tensor::empty({4, 4});
  EXPECT_THROW(fill_normal(part, rng, 0, 1, GlobalSlice{{6, 6}, {3, 0}}), Error);
  Tensor ints = Tensor::empty({4}, DType::i32);
  EXPECT_THROW(fill_uniform(ints, rng, 0, 1), Error);
}

}  // namespace
}  // namespace trident
