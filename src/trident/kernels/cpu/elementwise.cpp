// Elementwise kernels: contiguous loops the compiler vectorises (the
// accumulation type keeps bf16/f16 inputs exact through one rounding), split
// over the rank's threads in chunks of at least 16K elements.
#include "trident/kernels/cpu/elementwise.h"

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"

namespace trident::kernels::cpu {

namespace {
constexpr std::int64_t kGrain = 1 << 14;

template <typename T, typename F>
void map2(const T* a, const T* b, T* out, std::int64_t n, F f) {
  parallel_for(0, n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) out[i] = store<T>(f(load(a[i]), load(b[i])));
  });
}
}  // namespace

void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, std::int64_t n) {
  TRIDENT_DISPATCH_FLOAT(dtype, "binary", [&] {
    const auto* pa = static_cast<const scalar_t*>(a);
    const auto* pb = static_cast<const scalar_t*>(b);
    auto* po = static_cast<scalar_t*>(out);
    switch (op) {
      case BinaryOp::add: map2(pa, pb, po, n, [](auto x, auto y) { return x + y; }); break;
      case BinaryOp::sub: map2(pa, pb, po, n, [](auto x, auto y) { return x - y; }); break;
      case BinaryOp::mul: map2(pa, pb, po, n, [](auto x, auto y) { return x * y; }); break;
    }
  });
}

void scale(DType dtype, const void* a, double s, void* out, std::int64_t n) {
  TRIDENT_DISPATCH_FLOAT(dtype, "scale", [&] {
    using A = acc_t<scalar_t>;
    const auto* pa = static_cast<const scalar_t*>(a);
    auto* po = static_cast<scalar_t*>(out);
    const A sv = static_cast<A>(s);
    parallel_for(0, n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) po[i] = store<scalar_t>(load(pa[i]) * sv);
    });
  });
}

void axpy(DType dtype, double alpha, const void* src, void* dst, std::int64_t n) {
  TRIDENT_DISPATCH_FLOAT(dtype, "axpy", [&] {
    using A = acc_t<scalar_t>;
    const auto* ps = static_cast<const scalar_t*>(src);
    auto* pd = static_cast<scalar_t*>(dst);
    const A av = static_cast<A>(alpha);
    parallel_for(0, n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
      if (alpha == 1.0) {
        for (std::int64_t i = lo; i < hi; ++i) pd[i] = store<scalar_t>(load(pd[i]) + load(ps[i]));
      } else {
        for (std::int64_t i = lo; i < hi; ++i) pd[i] = store<scalar_t>(load(pd[i]) + av * load(ps[i]));
      }
    });
  });
}

void bias_add(DType dtype, const void* x, const void* bias, void* out, std::int64_t rows, std::int64_t cols) {
  TRIDENT_DISPATCH_FLOAT(dtype, "bias_add", [&] {
    const auto* px = static_cast<const scalar_t*>(x);
    const auto* pb = static_cast<const scalar_t*>(bias);
    auto* po = static_cast<scalar_t*>(out);
    parallel_for(0, rows, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(cols, 1)),
                 [&](std::int64_t lo, std::int64_t hi) {
                   for (std::int64_t r = lo; r < hi; ++r) {
                     const scalar_t* xr = px + r * cols;
                     scalar_t* orow = po + r * cols;
                     for (std::int64_t c = 0; c < cols; ++c) orow[c] = store<scalar_t>(load(xr[c]) + load(pb[c]));
                   }
                 });
  });
}

}  // namespace trident::kernels::cpu
