// The DType enumeration alone: C++17 and free of fmt, so that CUDA kernel
// files (compiled by nvcc, which cannot parse fmt in C++20 mode) can name
// dtypes. Everything else about dtypes is in dtype.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace trident {

enum class DType : std::uint8_t { f32, bf16, f16, f64, i32, i64, u8, u16 };
inline constexpr int kNumDTypes = 8;

std::size_t dtype_size(DType dtype) noexcept;
std::string_view dtype_name(DType dtype) noexcept;

}  // namespace trident
