// Row softmax: three passes over a row (max, exp and sum, normalise) with the
// exponentials kept in an acc_t scratch row, so bf16 inputs round only once.
// Row reductions use `omp simd` reductions, whose lane order is fixed by the
// compiled code and so identical for every thread count.
#include "trident/kernels/cpu/softmax.h"

#include <limits>
#include <vector>

#include "trident/core/error.h"
#include "trident/core/parallel.h"

namespace trident::kernels::cpu {

namespace {

constexpr std::int64_t kGrainElements = 1 << 14;

std::int64_t row_grain(std::int64_t cols) { return std::max<std::int64_t>(1, kGrainElements / std::max<std::int64_t>(cols, 1)); }

template <typename T>
void softmax_rows(const T* x, T* y, std::int64_t rows, std::int64_t cols) {
  using A = acc_t<T>;
  parallel_for(0, rows, row_grain(cols), [&](std::int64_t lo, std::int64_t hi) {
    std::vector<A> e(static_cast<std::size_t>(cols));
    A* ep = e.data();
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      A mx = -std::numeric_limits<A>::infinity();
#pragma omp simd reduction(max : mx)
      for (std::int64_t c = 0; c < cols; ++c) mx = std::max(mx, load(xr[c]));
      if (mx == -std::numeric_limits<A>::infinity()) {
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = store_fast<T>(A(0));
        continue;
      }
      A sum = 0;
#pragma omp simd reduction(+ : sum)
      for (std::int64_t c = 0; c < cols; ++c) {
        const A v = exp_acc(load(xr[c]) - mx);
        ep[c] = v;
        sum += v;
      }
      const A inv = A(1) / sum;
      for (std::int64_t c = 0; c < cols; ++c) yr[c] = store_fast<T>(ep[c] * inv);
    }
  });
}

template <typename T>
void softmax_backward_rows(const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t cols) {
  using A = acc_t<T>;
  parallel_for(0, rows, row_grain(cols), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* yr = y + r * cols;
      const T* dyr = dy + r * cols;
      T* dxr = dx + r * cols;
      A dot = 0;
#pragma omp simd reduction(+ : dot)
      for (std::int64_t c = 0; c < cols; ++c) dot += load(yr[c]) * load(dyr[c]);
      for (std::int64_t c = 0; c < cols; ++c) dxr[c] = store_fast<T>(load(yr[c]) * (load(dyr[c]) - dot));
    }
  });
}

}  // namespace

void softmax_forward(DType dtype, const void* x, void* y, std::int64_t rows, std::int64_t cols) {
  TRIDENT_DISPATCH_FLOAT(dtype, "softmax", [&] {
    softmax_rows(static_cast<const scalar_t*>(x), static_cast<scalar_t*>(y), rows, cols);
  });
}

void softmax_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t rows, std::int64_t cols) {
  TRIDENT_DISPATCH_FLOAT(dtype, "softmax_backward", [&] {
    softmax_backward_rows(static_cast<const scalar_t*>(y), static_cast<const scalar_t*>(dy),
                          static_cast<scalar_t*>(dx), rows, cols);
  });
}

}  // namespace trident::kernels::cpu
