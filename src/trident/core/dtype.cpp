#include "trident/core/dtype.h"

#include <cmath>
#include <cstring>

#include "trident/core/error.h"

namespace trident {

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::u16: return 2;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::u16: return "u16";
  }
  return "?";
}

namespace {

struct Spelling {
  std::string_view name;
  DType dtype;
};
// Every accepted spelling; the first of each dtype is its canonical name.
constexpr Spelling kSpellings[] = {
    {"f32", DType::f32},  {"fp32", DType::f32},     {"float32", DType::f32}, {"float", DType::f32},
    {"bf16", DType::bf16}, {"bfloat16", DType::bf16},
    {"f16", DType::f16},  {"fp16", DType::f16},     {"float16", DType::f16}, {"half", DType::f16},
    {"f64", DType::f64},  {"fp64", DType::f64},     {"float64", DType::f64}, {"double", DType::f64},
    {"i32", DType::i32},  {"int32", DType::i32},    {"i64", DType::i64},     {"int64", DType::i64},
    {"u8", DType::u8},    {"uint8", DType::u8},     {"u16", DType::u16},     {"uint16", DType::u16},
};

const Spelling* find_spelling(std::string_view name) {
  for (const Spelling& s : kSpellings) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

}  // namespace

DType parse_dtype(std::string_view name, std::string_view key) {
  const Spelling* s = find_spelling(name);
  TRIDENT_CHECK(s != nullptr, "{} must be one of f32, bf16, f16, f64, i32, i64, u8, u16, got '{}'", key, name);
  return s->dtype;
}

DType parse_precision(std::string_view name, std::string_view key) {
  const Spelling* s = find_spelling(name);
  TRIDENT_CHECK(s != nullptr && (s->dtype == DType::f32 || s->dtype == DType::bf16 || s->dtype == DType::f16),
                "{} must be fp32, bf16 or fp16, got '{}'", key, name);
  return s->dtype;
}

std::string_view torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    default: break;
  }
  TRIDENT_FAIL("torch_dtype: no Hugging Face precision for {} (expected f32, bf16 or f16)", dtype_name(dtype));
}

bool is_floating(DType dtype) noexcept {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f64;
}

namespace {
// Round a double to float with "round to odd": the result then rounds correctly
// (to nearest even) to any format with at least two fewer significand bits,
// which avoids double rounding for bf16 (8 bits) and f16 (11 bits).
float round_to_odd_float(double value) {
  if (std::isnan(value) || std::isinf(value)) return static_cast<float>(value);
  float f = static_cast<float>(value);
  if (static_cast<double>(f) == value) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(value)) {
    f = std::nextafter(f, 0.0f);  // truncate toward zero
  }
  std::uint32_t u = std::bit_cast<std::uint32_t>(f) | 1u;  // sticky bit
  return std::bit_cast<float>(u);
}
}  // namespace

std::uint16_t double_to_bf16_bits(double value) noexcept {
  return float_to_bf16_bits(round_to_odd_float(value));
}

std::uint16_t float_to_f16_bits(float value) noexcept {
  std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: quiet, keep top payload bits
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) {  // >= 65520 rounds to infinity (including inf itself)
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (abs < 0x38800000u) {  // below the smallest normal f16 (2^-14): subnormal or zero
    // value = abs_f * 2^24 units of the f16 subnormal step (2^-24), rounded to nearest even.
    if (abs < 0x33000000u) return sign;  // < 2^-25 rounds to zero (2^-25 itself ties to 0)
    std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    int exp = static_cast<int>(abs >> 23);  // biased
    int shift = 126 - exp;                  // 113..125 -> shifts of 14..24 (relative to 2^-24 units)
    // mant has 24 significant bits representing 1.m * 2^(exp-127); in units of 2^-24:
    // value_units = mant * 2^(exp-127-23+24) = mant >> (126 - exp)
    std::uint32_t q = mant >> shift;
    std::uint32_t rem = mant & ((1u << shift) - 1u);
    std::uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  // Normal: rebias exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  std::uint32_t rebased = abs - (112u << 23);
  std::uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rebased + rounding) >> 13));
}

std::uint16_t double_to_f16_bits(double value) noexcept {
  return float_to_f16_bits(round_to_odd_float(value));
}

float f16_bits_to_float(std::uint16_t bits) noexcept {
  std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  std::uint32_t exp = (bits >> 10) & 0x1fu;
  std::uint32_t mant = bits & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) {
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace trident
