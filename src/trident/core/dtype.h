// Element types and the conversions between them.
//
// bf16 and f16 are stored as 16-bit patterns (trident::bf16, trident::f16).
// Conversions from wider types round to nearest, ties to even; NaN stays NaN
// (quiet), infinities and signed zeros are preserved, f16 subnormals are exact.
// Conversions from f64 round once (no double rounding through f32).
#pragma once

#include <fmt/format.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trident/core/dtype_enum.h"

namespace trident {

// The one parser of dtype names. Accepted spellings: f32 fp32 float32 float, bf16
// bfloat16, f16 fp16 float16 half, f64 fp64 float64 double, i32 int32, i64
// int64, u8 uint8, u16 uint16. `key` names the config key or flag the name came
// from; anything else fails with "<key> must be one of f32, bf16, ..., got '<name>'".
DType parse_dtype(std::string_view name, std::string_view key = "dtype");
// A compute precision (train.precision, --precision, export's --dtype): the
// spellings of f32, bf16 and f16 above. Anything else fails with
// "<key> must be fp32, bf16 or fp16, got '<name>'".
DType parse_precision(std::string_view name, std::string_view key);
// The name Hugging Face's config.json gives a precision in "torch_dtype":
// "float32", "bfloat16" or "float16"; throws for the other dtypes.
std::string_view torch_dtype_name(DType dtype);
bool is_floating(DType dtype) noexcept;

// --- 16-bit float conversions (bit patterns) -------------------------------
// Inline so that loops storing bf16 vectorise.
inline std::uint16_t float_to_bf16_bits(float value) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  // Round to nearest even: add 0x7fff plus the lowest kept bit; a carry into the exponent
  // correctly rounds the largest finite values up to infinity. NaN keeps its sign and top
  // payload bits and is made quiet (so it can never turn into infinity).
  const auto rounded = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  const auto quiet_nan = static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  return (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
}
std::uint16_t double_to_bf16_bits(double value) noexcept;
inline float bf16_bits_to_float(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}
std::uint16_t float_to_f16_bits(float value) noexcept;
std::uint16_t double_to_f16_bits(double value) noexcept;
float f16_bits_to_float(std::uint16_t bits) noexcept;

struct bf16 {
  std::uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float v) noexcept : bits(float_to_bf16_bits(v)) {}
  explicit bf16(double v) noexcept : bits(double_to_bf16_bits(v)) {}
  explicit operator float() const noexcept { return bf16_bits_to_float(bits); }
  explicit operator double() const noexcept { return bf16_bits_to_float(bits); }
};

struct f16 {
  std::uint16_t bits = 0;
  f16() = default;
  explicit f16(float v) noexcept : bits(float_to_f16_bits(v)) {}
  explicit f16(double v) noexcept : bits(double_to_f16_bits(v)) {}
  explicit operator float() const noexcept { return f16_bits_to_float(bits); }
  explicit operator double() const noexcept { return f16_bits_to_float(bits); }
};

// The C++ type stored for each DType, and back.
template <typename T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<std::uint16_t> { static constexpr DType value = DType::u16; };
template <typename T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

// The type arithmetic on T is carried out in: f64 for f64, f32 for the rest.
template <typename T>
struct acc_type { using type = float; };
template <> struct acc_type<double> { using type = double; };
template <typename T>
using acc_t = typename acc_type<T>::type;

// Load/store through the accumulation type (float/double pass through).
template <typename T>
inline acc_t<T> load(const T& v) noexcept { return static_cast<acc_t<T>>(v); }
template <typename T, typename A>
inline T store(A v) noexcept { return static_cast<T>(v); }
template <> inline bf16 store<bf16, float>(float v) noexcept { return bf16(v); }
template <> inline f16 store<f16, float>(float v) noexcept { return f16(v); }

// Calls f(T{}) with T the C++ type of `dtype`, for the floating types f32, f64, bf16, f16.
#define TRIDENT_DISPATCH_FLOAT(dtype, opname, ...)                                              \
  [&] {                                                                                         \
    switch (dtype) {                                                                            \
      case ::trident::DType::f32: { using scalar_t = float; return __VA_ARGS__(); }             \
      case ::trident::DType::f64: { using scalar_t = double; return __VA_ARGS__(); }            \
      case ::trident::DType::bf16: { using scalar_t = ::trident::bf16; return __VA_ARGS__(); }  \
      case ::trident::DType::f16: { using scalar_t = ::trident::f16; return __VA_ARGS__(); }    \
      default: TRIDENT_FAIL("{}: unsupported dtype {} (expected a floating type)", opname,      \
                            ::trident::dtype_name(dtype));                                     \
    }                                                                                           \
  }()

// Same, for f32 and f64 only (kernels that have no reduced-precision variant).
#define TRIDENT_DISPATCH_F32_F64(dtype, opname, ...)                                            \
  [&] {                                                                                         \
    switch (dtype) {                                                                            \
      case ::trident::DType::f32: { using scalar_t = float; return __VA_ARGS__(); }             \
      case ::trident::DType::f64: { using scalar_t = double; return __VA_ARGS__(); }            \
      default: TRIDENT_FAIL("{}: unsupported dtype {} (expected f32 or f64)", opname,           \
                            ::trident::dtype_name(dtype));                                     \
    }                                                                                           \
  }()

}  // namespace trident

template <>
struct fmt::formatter<trident::DType> : fmt::formatter<std::string_view> {
  auto format(trident::DType d, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(trident::dtype_name(d), ctx);
  }
};
