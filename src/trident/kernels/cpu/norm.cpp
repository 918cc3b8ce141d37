// LayerNorm / RMSNorm: one row per iteration, rows split over the threads.
// Row reductions use 16 independent lanes so the compiler vectorises them
// without reassociating (no -ffast-math), which also makes their rounding
// independent of the thread count and of the vector width.
#include "trident/kernels/cpu/norm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>
#include <vector>

#include "trident/core/error.h"
#include "trident/core/parallel.h"

namespace trident::kernels::cpu {

namespace {

constexpr int kLanes = 16;
// Rows per parallel chunk: about 16K elements of work each.
std::int64_t row_grain(std::int64_t cols) { return std::max<std::int64_t>(1, (std::int64_t{1} << 14) / cols); }

// Rows are cut into at most kMaxBlocks blocks of at least kMinBlockRows rows
// for the weight-gradient partial sums; the cut depends on `rows` only.
constexpr std::int64_t kMinBlockRows = 16;
constexpr std::int64_t kMaxBlocks = 256;
std::int64_t rows_per_block(std::int64_t rows) {
  return std::max(kMinBlockRows, (rows + kMaxBlocks - 1) / kMaxBlocks);
}

// Rounds to T. bf16 is rounded inline (same rule as core's float_to_bf16_bits:
// nearest even, NaN kept quiet) so the store loops vectorise.
template <typename T, typename A>
inline T round_to(A v) noexcept {
  if constexpr (std::is_same_v<T, bf16> && std::is_same_v<A, float>) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
    const auto rounded = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    const auto quiet_nan = static_cast<std::uint16_t>((u >> 16) | 0x0040u);
    return bf16::from_bits((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  } else {
    return store<T>(v);
  }
}

// Σ term(i), i < n, in a fixed association: 16 running lanes, then a pairwise tree.
template <typename A, typename F>
inline A lane_sum(std::int64_t n, F&& term) {
  A acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += term(i + l);
  }
  for (int l = 0; i + l < n; ++l) acc[l] += term(i + l);
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

// Two sums at once (one pass over the row): term(i, s0, s1) adds into both.
template <typename A, typename F>
inline void lane_sum2(std::int64_t n, A& out0, A& out1, F&& term) {
  A a0[kLanes] = {}, a1[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) term(i + l, a0[l], a1[l]);
  }
  for (int l = 0; i + l < n; ++l) term(i + l, a0[l], a1[l]);
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) {
      a0[l] += a0[l + w];
      a1[l] += a1[l + w];
    }
  }
  out0 = a0[0];
  out1 = a1[0];
}

template <typename T>
std::vector<acc_t<T>> to_acc(const T* p, std::int64_t n) {
  std::vector<acc_t<T>> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = load(p[i]);
  return out;
}

// out[c] = Σ_b partial[b, c] over blocks in order, in f64, rounded once to T.
template <typename T, typename A>
void combine_partials(const std::vector<A>& partial, std::int64_t blocks, std::int64_t cols, T* out) {
  parallel_for(0, cols, 1024, [&](std::int64_t lo, std::int64_t hi) {
    std::vector<double> acc(static_cast<std::size_t>(hi - lo), 0.0);
    for (std::int64_t b = 0; b < blocks; ++b) {
      const A* p = partial.data() + b * cols;
      for (std::int64_t c = lo; c < hi; ++c) acc[static_cast<std::size_t>(c - lo)] += static_cast<double>(p[c]);
    }
    for (std::int64_t c = lo; c < hi; ++c) out[c] = T(acc[static_cast<std::size_t>(c - lo)]);
  });
}

// Runs block(b, r0, r1, partials...) for every row block and returns the number of blocks.
template <typename F>
std::int64_t for_each_row_block(std::int64_t rows, F&& block) {
  const std::int64_t per = rows_per_block(rows);
  const std::int64_t blocks = (rows + per - 1) / per;
  parallel_for(0, blocks, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t b = lo; b < hi; ++b) block(b, b * per, std::min(rows, (b + 1) * per));
  });
  return blocks;
}

template <typename T>
void layer_norm_forward_impl(const T* x, const T* weight, const T* bias, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                             std::int64_t rows, std::int64_t cols, double eps) {
  using A = acc_t<T>;
  const std::vector<A> w = to_acc(weight, cols);
  const std::vector<A> b = bias ? to_acc(bias, cols) : std::vector<A>(static_cast<std::size_t>(cols), A(0));
  const A inv_cols = A(1) / static_cast<A>(cols);
  const A eps_a = static_cast<A>(eps);
  parallel_for(0, rows, row_grain(cols), [&](std::int64_t lo, std::int64_t hi) {
    const A* wp = w.data();
    const A* bp = b.data();
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      // Corrected two-pass: sum d and d^2 for d = x - m0; the sum of d repairs
      // the rounding error of m0 (Chan, Golub & LeVeque).
      const A m0 = lane_sum<A>(cols, [&](std::int64_t i) { return load(xr[i]); }) * inv_cols;
      A sum_d, sum_d2;
      lane_sum2<A>(cols, sum_d, sum_d2, [&](std::int64_t i, A& s1, A& s2) {
        const A d = load(xr[i]) - m0;
        s1 += d;
        s2 += d * d;
      });
      const A m = m0 + sum_d * inv_cols;
      const A var = std::max(A(0), (sum_d2 - sum_d * sum_d * inv_cols) * inv_cols);
      const A rs = A(1) / std::sqrt(var + eps_a);
      mean[r] = m;
      rstd[r] = rs;
      for (std::int64_t i = 0; i < cols; ++i) yr[i] = round_to<T>((load(xr[i]) - m) * rs * wp[i] + bp[i]);
    }
  });
}

template <typename T>
void layer_norm_backward_impl(const T* dy, const T* x, const T* weight, const acc_t<T>* mean, const acc_t<T>* rstd,
                              T* dx, T* dweight, T* dbias, std::int64_t rows, std::int64_t cols) {
  using A = acc_t<T>;
  const std::vector<A> w = to_acc(weight, cols);
  const A inv_cols = A(1) / static_cast<A>(cols);
  const std::int64_t max_blocks = (rows + rows_per_block(rows) - 1) / rows_per_block(rows);
  std::vector<A> pw(static_cast<std::size_t>(max_blocks * cols));
  std::vector<A> pb(dbias ? static_cast<std::size_t>(max_blocks * cols) : 0);
  const std::int64_t blocks = for_each_row_block(rows, [&](std::int64_t blk, std::int64_t r0, std::int64_t r1) {
    const A* wp = w.data();
    A* pwb = pw.data() + blk * cols;
    A* pbb = dbias ? pb.data() + blk * cols : nullptr;
    std::fill(pwb, pwb + cols, A(0));
    if (pbb) std::fill(pbb, pbb + cols, A(0));
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      const T* dyr = dy + r * cols;
      T* dxr = dx + r * cols;
      const A m = mean[r], rs = rstd[r];
      // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight.
      A sum_g, sum_gx;
      lane_sum2<A>(cols, sum_g, sum_gx, [&](std::int64_t i, A& s0, A& s1) {
        const A g = load(dyr[i]) * wp[i];
        s0 += g;
        s1 += g * ((load(xr[i]) - m) * rs);
      });
      const A mg = sum_g * inv_cols, mgx = sum_gx * inv_cols;
      for (std::int64_t i = 0; i < cols; ++i) {
        const A d = load(dyr[i]);
        const A xh = (load(xr[i]) - m) * rs;
        dxr[i] = round_to<T>(rs * (d * wp[i] - mg - xh * mgx));
        pwb[i] += d * xh;
      }
      if (pbb) {
        for (std::int64_t i = 0; i < cols; ++i) pbb[i] += load(dyr[i]);
      }
    }
  });
  combine_partials(pw, blocks, cols, dweight);
  if (dbias) combine_partials(pb, blocks, cols, dbias);
}

template <typename T>
void rms_norm_forward_impl(const T* x, const T* weight, T* y, acc_t<T>* rstd, std::int64_t rows, std::int64_t cols,
                           double eps) {
  using A = acc_t<T>;
  const std::vector<A> w = to_acc(weight, cols);
  const A inv_cols = A(1) / static_cast<A>(cols);
  const A eps_a = static_cast<A>(eps);
  parallel_for(0, rows, row_grain(cols), [&](std::int64_t lo, std::int64_t hi) {
    const A* wp = w.data();
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      const A ms = lane_sum<A>(cols, [&](std::int64_t i) {
                     const A v = load(xr[i]);
                     return v * v;
                   }) * inv_cols;
      const A rs = A(1) / std::sqrt(ms + eps_a);
      rstd[r] = rs;
      for (std::int64_t i = 0; i < cols; ++i) yr[i] = round_to<T>(load(xr[i]) * rs * wp[i]);
    }
  });
}

template <typename T>
void rms_norm_backward_impl(const T* dy, const T* x, const T* weight, const acc_t<T>* rstd, T* dx, T* dweight,
                            std::int64_t rows, std::int64_t cols) {
  using A = acc_t<T>;
  const std::vector<A> w = to_acc(weight, cols);
  const A inv_cols = A(1) / static_cast<A>(cols);
  const std::int64_t max_blocks = (rows + rows_per_block(rows) - 1) / rows_per_block(rows);
  std::vector<A> pw(static_cast<std::size_t>(max_blocks * cols));
  const std::int64_t blocks = for_each_row_block(rows, [&](std::int64_t blk, std::int64_t r0, std::int64_t r1) {
    const A* wp = w.data();
    A* pwb = pw.data() + blk * cols;
    std::fill(pwb, pwb + cols, A(0));
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      const T* dyr = dy + r * cols;
      T* dxr = dx + r * cols;
      const A rs = rstd[r];
      // dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * weight, xhat = x * rstd.
      const A mgx = lane_sum<A>(cols, [&](std::int64_t i) { return load(dyr[i]) * wp[i] * (load(xr[i]) * rs); }) *
                    inv_cols;
      for (std::int64_t i = 0; i < cols; ++i) {
        const A d = load(dyr[i]);
        const A xh = load(xr[i]) * rs;
        dxr[i] = round_to<T>(rs * (d * wp[i] - xh * mgx));
        pwb[i] += d * xh;
      }
    }
  });
  combine_partials(pw, blocks, cols, dweight);
}

}  // namespace

void layer_norm_forward(DType dtype, const void* x, const void* weight, const void* bias, void* y, void* mean,
                        void* rstd, std::int64_t rows, std::int64_t cols, double eps) {
  TRIDENT_DISPATCH_FLOAT(dtype, "layer_norm", [&] {
    using A = acc_t<scalar_t>;
    layer_norm_forward_impl(static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(weight),
                            static_cast<const scalar_t*>(bias), static_cast<scalar_t*>(y), static_cast<A*>(mean),
                            static_cast<A*>(rstd), rows, cols, eps);
  });
}

void layer_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* mean,
                         const void* rstd, void* dx, void* dweight, void* dbias, std::int64_t rows, std::int64_t cols) {
  TRIDENT_DISPATCH_FLOAT(dtype, "layer_norm_backward", [&] {
    using A = acc_t<scalar_t>;
    layer_norm_backward_impl(static_cast<const scalar_t*>(dy), static_cast<const scalar_t*>(x),
                             static_cast<const scalar_t*>(weight), static_cast<const A*>(mean),
                             static_cast<const A*>(rstd), static_cast<scalar_t*>(dx), static_cast<scalar_t*>(dweight),
                             static_cast<scalar_t*>(dbias), rows, cols);
  });
}

void rms_norm_forward(DType dtype, const void* x, const void* weight, void* y, void* rstd, std::int64_t rows,
                      std::int64_t cols, double eps) {
  TRIDENT_DISPATCH_FLOAT(dtype, "rms_norm", [&] {
    using A = acc_t<scalar_t>;
    rms_norm_forward_impl(static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(weight),
                          static_cast<scalar_t*>(y), static_cast<A*>(rstd), rows, cols, eps);
  });
}

void rms_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* rstd, void* dx,
                       void* dweight, std::int64_t rows, std::int64_t cols) {
  TRIDENT_DISPATCH_FLOAT(dtype, "rms_norm_backward", [&] {
    using A = acc_t<scalar_t>;
    rms_norm_backward_impl(static_cast<const scalar_t*>(dy), static_cast<const scalar_t*>(x),
                           static_cast<const scalar_t*>(weight), static_cast<const A*>(rstd),
                           static_cast<scalar_t*>(dx), static_cast<scalar_t*>(dweight), rows, cols);
  });
}

}  // namespace trident::kernels::cpu
