// LayerNorm / RMSNorm: one row per iteration, rows split over the threads.
// Row reductions use 64 independent lanes so the compiler vectorises them
// without reassociating (no -ffast-math) and with four independent vector
// accumulators (an FMA chain per register would otherwise be latency-bound);
// the fixed lane order also makes their rounding independent of the thread
// count and of the vector width.
#include "trident/kernels/cpu/norm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>
#include <vector>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/kernels/cpu/lane_sum.h"

namespace trident::kernels::cpu {

namespace {

constexpr int kLanes = 64;
// Rows per parallel chunk: about 16K elements of work each.
std::int64_t row_grain(std::int64_t cols) { return std::max<std::int64_t>(1, (std::int64_t{1} << 14) / cols); }

// Rows are cut into at most kMaxBlocks blocks of at least kMinBlockRows rows
// for the weight-gradient partial sums; the cut depends on `rows` only.
constexpr std::int64_t kMinBlockRows = 16;
constexpr std::int64_t kMaxBlocks = 256;
std::int64_t rows_per_block(std::int64_t rows) {
  return std::max(kMinBlockRows, (rows + kMaxBlocks - 1) / kMaxBlocks);
}

// Rounds to T once (store<T> of core/dtype.h).
template <typename T, typename A>
inline T round_to(A v) noexcept {
  return store<T>(v);  // bf16 rounding is inline in core/dtype.h, so this vectorises
}

// Σ term(i), i < n, in a fixed association: kLanes running lanes, then a pairwise tree (lane_sum.h).
template <typename A, typename F>
inline A row_sum(std::int64_t n, F&& term) {
  return lane_sum<kLanes, LaneFold::pairwise, A>(n, term);
}

// Rows of 16-bit types are widened once into a per-thread buffer, so the several
// passes over a row run on plain f32 and vectorise; f32/f64 rows are used in place.
template <typename T>
class RowReader {
 public:
  using A = acc_t<T>;
  explicit RowReader(std::int64_t cols) : buf_(std::is_same_v<T, A> ? 0 : static_cast<std::size_t>(cols)) {}
  const A* operator()(const T* row, std::int64_t cols) {
    if constexpr (std::is_same_v<T, A>) {
      return row;
    } else {
      A* b = buf_.data();
      for (std::int64_t i = 0; i < cols; ++i) b[i] = load(row[i]);
      return b;
    }
  }

 private:
  std::vector<A> buf_;
};

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

// Runs block(b, r0, r1) for every row block [r0, r1) and returns the number of blocks.
template <typename F>
std::int64_t for_each_row_block(std::int64_t rows, F&& block) {
  const std::int64_t per = rows_per_block(rows);
  const std::int64_t blocks = (rows + per - 1) / per;
  parallel_for(0, blocks, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t b = lo; b < hi; ++b) block(b, b * per, std::min(rows, (b + 1) * per));
  });
  return blocks;
}

// --- one row each; restrict-qualified parameters let the loops vectorise without alias checks ---

// Writes y and the row's mean and rstd.
template <typename T, typename A>
inline void layer_norm_row(const A* __restrict x, const A* __restrict w, const A* __restrict b, T* __restrict y,
                           std::int64_t cols, A inv_cols, A eps, A& mean, A& rstd) {
  // Corrected two-pass: the sum of d = x - m0 repairs the rounding error of
  // m0 in both the mean and the variance (Chan, Golub & LeVeque).
  const A m0 = row_sum<A>(cols, [&](std::int64_t i) { return x[i]; }) * inv_cols;
  const A sum_d = row_sum<A>(cols, [&](std::int64_t i) { return x[i] - m0; });
  const A sum_d2 = row_sum<A>(cols, [&](std::int64_t i) { return (x[i] - m0) * (x[i] - m0); });
  const A m = m0 + sum_d * inv_cols;
  const A var = std::max(A(0), (sum_d2 - sum_d * sum_d * inv_cols) * inv_cols);
  const A rs = A(1) / std::sqrt(var + eps);
  for (std::int64_t i = 0; i < cols; ++i) y[i] = round_to<T>((x[i] - m) * rs * w[i] + b[i]);
  mean = m;
  rstd = rs;
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight; adds dy * xhat and dy to the partials.
template <typename T, typename A>
inline void layer_norm_backward_row(const A* __restrict x, const A* __restrict dy, const A* __restrict w, A m, A rs,
                                    std::int64_t cols, A inv_cols, T* __restrict dx, A* __restrict pw,
                                    A* __restrict pb) {
  const A mg = row_sum<A>(cols, [&](std::int64_t i) { return dy[i] * w[i]; }) * inv_cols;
  const A mgx = row_sum<A>(cols, [&](std::int64_t i) { return dy[i] * w[i] * ((x[i] - m) * rs); }) * inv_cols;
  for (std::int64_t i = 0; i < cols; ++i) {
    const A xh = (x[i] - m) * rs;
    dx[i] = round_to<T>(rs * (dy[i] * w[i] - mg - xh * mgx));
    pw[i] += dy[i] * xh;
    pb[i] += dy[i];
  }
}

template <typename T, typename A>
inline A rms_norm_row(const A* __restrict x, const A* __restrict w, T* __restrict y, std::int64_t cols, A inv_cols,
                      A eps) {
  const A ms = row_sum<A>(cols, [&](std::int64_t i) { return x[i] * x[i]; }) * inv_cols;
  const A rs = A(1) / std::sqrt(ms + eps);
  for (std::int64_t i = 0; i < cols; ++i) y[i] = round_to<T>(x[i] * rs * w[i]);
  return rs;
}

// dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * weight, xhat = x * rstd; adds dy * xhat to the partial.
template <typename T, typename A>
inline void rms_norm_backward_row(const A* __restrict x, const A* __restrict dy, const A* __restrict w, A rs,
                                  std::int64_t cols, A inv_cols, T* __restrict dx, A* __restrict pw) {
  const A mgx = row_sum<A>(cols, [&](std::int64_t i) { return dy[i] * w[i] * (x[i] * rs); }) * inv_cols;
  for (std::int64_t i = 0; i < cols; ++i) {
    const A xh = x[i] * rs;
    dx[i] = round_to<T>(rs * (dy[i] * w[i] - xh * mgx));
    pw[i] += dy[i] * xh;
  }
}

// --- whole tensors ---

template <typename T>
void layer_norm_forward_impl(const T* x, const T* weight, const T* bias, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                             std::int64_t rows, std::int64_t cols, double eps) {
  using A = acc_t<T>;
  const std::vector<A> w = to_acc(weight, cols);
  const std::vector<A> b = bias ? to_acc(bias, cols) : std::vector<A>(static_cast<std::size_t>(cols), A(0));
  const A inv_cols = A(1) / static_cast<A>(cols);
  parallel_for(0, rows, row_grain(cols), [&](std::int64_t lo, std::int64_t hi) {
    RowReader<T> read_x(cols);
    for (std::int64_t r = lo; r < hi; ++r) {
      layer_norm_row(read_x(x + r * cols, cols), w.data(), b.data(), y + r * cols, cols, inv_cols,
                     static_cast<A>(eps), mean[r], rstd[r]);
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
  // The bias partials are formed even without a bias: one fused pass costs less than a branch.
  std::vector<A> pw(static_cast<std::size_t>(max_blocks * cols)), pb(pw.size());
  const std::int64_t blocks = for_each_row_block(rows, [&](std::int64_t blk, std::int64_t r0, std::int64_t r1) {
    RowReader<T> read_x(cols), read_dy(cols);
    A* pwb = pw.data() + blk * cols;
    A* pbb = pb.data() + blk * cols;
    std::fill(pwb, pwb + cols, A(0));
    std::fill(pbb, pbb + cols, A(0));
    for (std::int64_t r = r0; r < r1; ++r) {
      layer_norm_backward_row(read_x(x + r * cols, cols), read_dy(dy + r * cols, cols), w.data(), mean[r], rstd[r],
                              cols, inv_cols, dx + r * cols, pwb, pbb);
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
  parallel_for(0, rows, row_grain(cols), [&](std::int64_t lo, std::int64_t hi) {
    RowReader<T> read_x(cols);
    for (std::int64_t r = lo; r < hi; ++r) {
      rstd[r] = rms_norm_row(read_x(x + r * cols, cols), w.data(), y + r * cols, cols, inv_cols, static_cast<A>(eps));
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
    RowReader<T> read_x(cols), read_dy(cols);
    A* pwb = pw.data() + blk * cols;
    std::fill(pwb, pwb + cols, A(0));
    for (std::int64_t r = r0; r < r1; ++r) {
      rms_norm_backward_row(read_x(x + r * cols, cols), read_dy(dy + r * cols, cols), w.data(), rstd[r], cols,
                            inv_cols, dx + r * cols, pwb);
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
