#include "trident/core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "trident/core/error.h"

namespace trident {
namespace {

// Reference bf16 rounding computed independently in double arithmetic: the two
// neighbouring bf16 values around x, pick the nearer, ties to even mantissa.
std::uint16_t reference_bf16(double x) {
  float f = static_cast<float>(x);
  if (std::isnan(x)) return 0x7fc0;
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);  // truncation toward zero (of f)
  // Use exact double comparisons on the two candidates.
  auto value = [](std::uint16_t b) { return static_cast<double>(bf16_bits_to_float(b)); };
  std::uint16_t down = lo, up = static_cast<std::uint16_t>(lo + 1);
  // Truncation of f may overshoot x when f rounded away from zero; step back.
  if (std::fabs(value(down)) > std::fabs(x)) {
    up = down;
    down = static_cast<std::uint16_t>(down - 1);
  }
  double dd = std::fabs(x - value(down)), du = std::fabs(value(up) - x);
  if (dd < du) return down;
  if (du < dd) return up;
  return (down & 1) ? up : down;
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_EQ(dtype_name(DType::u16), "u16");
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_THROW(parse_dtype("float8"), Error);
}

// Thrown message of f(), "" when it does not throw.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(DType, OneParserForEverySpelling) {
  for (const char* name : {"f32", "fp32", "float32", "float"}) EXPECT_EQ(parse_dtype(name), DType::f32) << name;
  for (const char* name : {"f64", "fp64", "float64", "double"}) EXPECT_EQ(parse_dtype(name), DType::f64) << name;
  for (const char* name : {"f16", "fp16", "float16", "half"}) EXPECT_EQ(parse_dtype(name), DType::f16) << name;
  EXPECT_EQ(parse_dtype("int64"), DType::i64);
  EXPECT_EQ(parse_dtype("uint16"), DType::u16);
  // Every canonical name reads back.
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::u8, DType::u16}) {
    EXPECT_EQ(parse_dtype(dtype_name(d)), d) << dtype_name(d);
  }
  // The error names the key the value came from and the accepted values.
  EXPECT_EQ(error_of([] { parse_dtype("float8", "data.dtype"); }),
            "data.dtype must be one of f32, bf16, f16, f64, i32, i64, u8, u16, got 'float8'");
  EXPECT_EQ(error_of([] { parse_dtype("F32"); }).substr(0, 10), "dtype must");
}

TEST(DType, PrecisionsAreTheFloatingComputeTypes) {
  EXPECT_EQ(parse_precision("fp32", "train.precision"), DType::f32);
  EXPECT_EQ(parse_precision("float32", "train.precision"), DType::f32);
  EXPECT_EQ(parse_precision("bf16", "--precision"), DType::bf16);
  EXPECT_EQ(parse_precision("bfloat16", "--precision"), DType::bf16);
  EXPECT_EQ(parse_precision("fp16", "--dtype"), DType::f16);
  EXPECT_EQ(error_of([] { parse_precision("fp8", "train.precision"); }),
            "train.precision must be fp32, bf16 or fp16, got 'fp8'");
  // A dtype that is not a compute precision fails the same way.
  EXPECT_EQ(error_of([] { parse_precision("f64", "--dtype"); }), "--dtype must be fp32, bf16 or fp16, got 'f64'");
  EXPECT_EQ(error_of([] { parse_precision("", "--precision"); }), "--precision must be fp32, bf16 or fp16, got ''");
}

TEST(DType, TorchDtypeNames) {
  EXPECT_EQ(torch_dtype_name(DType::f32), "float32");
  EXPECT_EQ(torch_dtype_name(DType::bf16), "bfloat16");
  EXPECT_EQ(torch_dtype_name(DType::f16), "float16");
  EXPECT_THROW(torch_dtype_name(DType::i64), Error);
  // What Hugging Face writes reads back through the one parser.
  for (DType d : {DType::f32, DType::bf16, DType::f16}) EXPECT_EQ(parse_precision(torch_dtype_name(d), "torch_dtype"), d);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): rounds up.
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16_bits(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  const std::uint16_t nan = float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(nan)));
  // A signalling NaN whose payload sits only in the low bits must not become infinity.
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::bit_cast<float>(0x7f800001u)))));
}

TEST(DType, Bf16MatchesReferenceOnRandomValues) {
  std::mt19937_64 gen(7);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    float f = std::bit_cast<float>(bits(gen));
    if (std::isnan(f) || std::isinf(f)) continue;
    if (std::fabs(f) > 3.0e38f) continue;  // reference cannot represent the overflow candidate
    ASSERT_EQ(float_to_bf16_bits(f), reference_bf16(f)) << "value " << f;
  }
}

TEST(DType, DoubleToBf16HasNoDoubleRounding) {
  // x = 1 + 2^-8 + 2^-30: rounding to f32 first gives 1 + 2^-8 exactly (a tie, then to 1.0);
  // the correct single rounding goes up to 1 + 2^-7.
  double x = 1.0 + 0x1p-8 + 0x1p-30;
  EXPECT_EQ(double_to_bf16_bits(x), 0x3f81);
  EXPECT_EQ(double_to_bf16_bits(1.0 + 0x1p-8), 0x3f80);
}

TEST(DType, F16ExactValues) {
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16_bits(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(float_to_f16_bits(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16_bits(0x1p-25f), 0x0000);  // tie to even -> zero
  EXPECT_EQ(float_to_f16_bits(0x1.8p-24f), 0x0002);  // 1.5 units -> tie to even 2
  EXPECT_EQ(float_to_f16_bits(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_f16_bits(1.0f + 0x1p-11f), 0x3c00);  // tie to even
  EXPECT_EQ(float_to_f16_bits(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_TRUE(std::isnan(f16_bits_to_float(float_to_f16_bits(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f16_bits_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_bits_to_float(0x0001), 0x1p-24f);
}

TEST(DType, F16RoundTripsEveryPattern) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = f16_bits_to_float(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_bits_to_float(float_to_f16_bits(f))));
      continue;
    }
    ASSERT_EQ(float_to_f16_bits(f), bits) << "pattern " << b;
    ASSERT_EQ(double_to_f16_bits(static_cast<double>(f)), bits) << "pattern " << b;
  }
}

TEST(DType, Bf16RoundTripsEveryPattern) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = bf16_bits_to_float(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16_bits(f), bits);
  }
}

}  // namespace
}  // namespace trident
