// Row softmax: three passes over a row (max, exp and sum, normalise) with the
// exponentials kept in an acc_t scratch row, so bf16 inputs round only once.
// Row reductions use `omp simd` reductions, whose lane order is fixed by the
// compiled code and so identical for every thread count.
#include "trident/kernels/cpu/softmax.h"

#include <limits>
#include <vector>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"

namespace trident::kernels::cpu {

namespace {

constexpr std::int64_t kGrainElements = 1 << 14;

std::int64_t row_grain(std::int64_t cols) { return std::max<std::int64_t>(1, kGrainElements / std::max<std::int64_t>(cols, 1)); }

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define TRIDENT_SOFTMAX_AVX512 1
constexpr __mmask16 kAllLanes = 0xffff;  // zero-masked forms: see exp_f32x16

inline __mmask16 tail_lanes(std::int64_t remaining) {
  return static_cast<__mmask16>((1u << std::min<std::int64_t>(remaining, 16)) - 1u);
}

// Lane totals combined in a fixed order (through memory: GCC 12's _mm512_reduce_*
// trip -Wuninitialized).
inline float fold_max(__m512 v) {
  alignas(64) float x[16];
  _mm512_store_ps(x, v);
  float m = x[0];
  for (int i = 1; i < 16; ++i) m = std::max(m, x[i]);
  return m;
}
inline float fold_sum(__m512 v) {
  alignas(64) float x[16];
  _mm512_store_ps(x, v);
  float s = x[0];
  for (int i = 1; i < 16; ++i) s += x[i];
  return s;
}
#endif

// max over a row of n elements.
template <typename T>
acc_t<T> row_max(const T* x, std::int64_t n) {
  using A = acc_t<T>;
#ifdef TRIDENT_SOFTMAX_AVX512
  if constexpr (std::is_same_v<A, float>) {
    const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __m512 m = neg_inf;
    std::int64_t c = 0;
    for (; c + 16 <= n; c += 16) m = _mm512_maskz_max_ps(kAllLanes, m, load_f32x16(x + c, kAllLanes));
    if (c < n) {
      const __mmask16 keep = tail_lanes(n - c);
      m = _mm512_maskz_max_ps(kAllLanes, m, _mm512_mask_mov_ps(neg_inf, keep, load_f32x16(x + c, keep)));
    }
    return fold_max(m);
  }
#endif
  A mx = -std::numeric_limits<A>::infinity();
#pragma omp simd reduction(max : mx)
  for (std::int64_t c = 0; c < n; ++c) mx = std::max(mx, load(x[c]));
  return mx;
}

// e[c] = exp(x[c] − mx); returns Σ e.
template <typename T>
acc_t<T> exp_and_sum(const T* x, std::int64_t n, acc_t<T> mx, acc_t<T>* e) {
  using A = acc_t<T>;
#ifdef TRIDENT_SOFTMAX_AVX512
  if constexpr (std::is_same_v<A, float>) {
    const __m512 m = _mm512_set1_ps(mx);
    __m512 sum = _mm512_setzero_ps();
    std::int64_t c = 0;
    for (; c + 16 <= n; c += 16) {
      const __m512 v = exp_f32x16(_mm512_sub_ps(load_f32x16(x + c, kAllLanes), m));
      _mm512_storeu_ps(e + c, v);
      sum = _mm512_add_ps(sum, v);
    }
    if (c < n) {  // masked tail (masked stores are slow on some cores, so only here)
      const __mmask16 keep = tail_lanes(n - c);
      const __m512 v = _mm512_maskz_mov_ps(keep, exp_f32x16(_mm512_sub_ps(load_f32x16(x + c, keep), m)));
      _mm512_mask_storeu_ps(e + c, keep, v);
      sum = _mm512_add_ps(sum, v);
    }
    return fold_sum(sum);
  }
#endif
  A sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t c = 0; c < n; ++c) {
    const A v = exp_acc(load(x[c]) - mx);
    e[c] = v;
    sum += v;
  }
  return sum;
}

template <typename T>
void softmax_rows(const T* x, T* y, std::int64_t rows, std::int64_t cols) {
  using A = acc_t<T>;
  parallel_for(0, rows, row_grain(cols), [&](std::int64_t lo, std::int64_t hi) {
    std::vector<A> e(static_cast<std::size_t>(cols));
    A* ep = e.data();
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      const A mx = row_max(xr, cols);
      if (mx == -std::numeric_limits<A>::infinity()) {
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = store<T>(A(0));
        continue;
      }
      const A inv = A(1) / exp_and_sum(xr, cols, mx, ep);
      for (std::int64_t c = 0; c < cols; ++c) yr[c] = store<T>(ep[c] * inv);
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
      for (std::int64_t c = 0; c < cols; ++c) dxr[c] = store<T>(load(yr[c]) * (load(dyr[c]) - dot));
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
