#include "trident/core/convert.h"

#include <cmath>
#include <type_traits>

#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/core/tensor.h"

namespace trident {
namespace {

template <typename T>
double to_double(T v) {
  return static_cast<double>(v);
}

template <typename D>
D from_double_like(double v) {
  if constexpr (std::is_same_v<D, bf16> || std::is_same_v<D, f16>) {
    return D(v);
  } else if constexpr (std::is_floating_point_v<D>) {
    return static_cast<D>(v);
  } else {
    if (std::isnan(v)) return D{0};
    return static_cast<D>(v);
  }
}

template <typename S, typename D>
void convert_typed(const S* src, D* dst, std::int64_t count) {
  parallel_for(0, count, 1 << 15, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) {
      if constexpr (std::is_same_v<S, float> && (std::is_same_v<D, bf16> || std::is_same_v<D, f16>)) {
        dst[i] = D(src[i]);  // single rounding from f32
      } else if constexpr ((std::is_same_v<S, bf16> || std::is_same_v<S, f16>) && std::is_same_v<D, float>) {
        dst[i] = static_cast<float>(src[i]);
      } else {
        dst[i] = from_double_like<D>(to_double(src[i]));
      }
    }
  });
}

template <typename F>
void dispatch_any(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::bf16: return f(bf16{});
    case DType::f16: return f(f16{});
    case DType::f64: return f(double{});
    case DType::i32: return f(std::int32_t{});
    case DType::i64: return f(std::int64_t{});
    case DType::u8: return f(std::uint8_t{});
    case DType::u16: return f(std::uint16_t{});
  }
}

}  // namespace

void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t count) {
  dispatch_any(src_dtype, [&](auto s) {
    using S = decltype(s);
    dispatch_any(dst_dtype, [&](auto d) {
      using D = decltype(d);
      convert_typed(static_cast<const S*>(src), static_cast<D*>(dst), count);
    });
  });
}

void fill_value(Tensor& t, double value) {
  check_cpu(t, "fill_value");
  dispatch_any(t.dtype(), [&](auto d) {
    using D = decltype(d);
    D v = from_double_like<D>(value);
    D* p = static_cast<D*>(t.raw_data());
    parallel_for(0, t.numel(), 1 << 15, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) p[i] = v;
    });
  });
}

}  // namespace trident
