// Cross-entropy kernels. A GPT-2 vocabulary row (50304 f32 = 196 KiB) stays in
// L2 between the max pass and the exp pass, so two passes cost about one read
// from memory; the online (single-pass) softmax would double the exponentials.
// Reductions run in kLanes independent accumulators (plain loops that the
// compiler turns into vector code without -ffast-math) combined in a fixed
// order, so the result depends only on the row, never on the threading.
// The vocabulary-parallel kernels run the same row loops over a rank's slice.
#include "trident/kernels/cpu/loss.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/kernels/cpu/exp.h"
#include "trident/kernels/cpu/lane_sum.h"

namespace trident::kernels::cpu {

namespace {
constexpr std::int64_t kGrain = 1 << 14;
constexpr int kLanes = 32;

template <typename T>
acc_t<T> row_max(const T* x, std::int64_t n) {
  using A = acc_t<T>;
  A m[kLanes];
  for (A& v : m) v = -std::numeric_limits<A>::infinity();
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const A v = load(x[i + j]);
      m[j] = v > m[j] ? v : m[j];
    }
  }
  A best = m[0];
  for (int j = 1; j < kLanes; ++j) best = m[j] > best ? m[j] : best;
  for (; i < n; ++i) best = load(x[i]) > best ? load(x[i]) : best;
  return best;
}

template <typename T>
acc_t<T> row_sum_exp(const T* x, std::int64_t n, acc_t<T> shift) {
  using A = acc_t<T>;
  return lane_sum<kLanes, LaneFold::in_order, A>(n, [&](std::int64_t i) { return exp_acc<A>(load(x[i]) - shift); });
}

// drow[j] = exp(row[j] - shift) * mul for j < n, rounded once: the softmax-gradient loop of both backwards.
template <typename T>
void scaled_exp_row(const T* row, T* drow, std::int64_t n, acc_t<T> shift, acc_t<T> mul) {
  for (std::int64_t j = 0; j < n; ++j) drow[j] = store<T>(exp_acc<acc_t<T>>(load(row[j]) - shift) * mul);
}

template <typename T>
void zero_row(T* drow, std::int64_t n) {
  if (n > 0) std::memset(static_cast<void*>(drow), 0, static_cast<std::size_t>(n) * sizeof(T));
}

template <typename F>
void dispatch_targets(DType target_dtype, const char* op, F&& f) {
  switch (target_dtype) {
    case DType::i32: return f(std::int32_t{});
    case DType::i64: return f(std::int64_t{});
    default: TRIDENT_FAIL("{}: targets must be i32 or i64, got {}", op, target_dtype);
  }
}

std::int64_t row_grain(std::int64_t vocab) { return std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(vocab, 1)); }
}  // namespace

void cross_entropy_forward(DType dtype, DType target_dtype, const void* logits, const void* targets, void* losses,
                           void* lse, std::int64_t rows, std::int64_t vocab, std::int64_t ignore_index) {
  TRIDENT_DISPATCH_FLOAT(dtype, "cross_entropy", [&] {
    using A = acc_t<scalar_t>;
    dispatch_targets(target_dtype, "cross_entropy", [&](auto target_tag) {
      using I = decltype(target_tag);
      const auto* x = static_cast<const scalar_t*>(logits);
      const auto* tg = static_cast<const I*>(targets);
      auto* loss = static_cast<A*>(losses);
      auto* out_lse = static_cast<A*>(lse);
      parallel_for(0, rows, row_grain(vocab), [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t r = lo; r < hi; ++r) {
          const scalar_t* row = x + r * vocab;
          const A m = row_max(row, vocab);
          const A log_sum = std::log(row_sum_exp(row, vocab, m));
          out_lse[r] = m + log_sum;
          const auto t = static_cast<std::int64_t>(tg[r]);
          // (max - x[t]) + log_sum keeps the loss accurate when the logits are large, where
          // lse - x[t] would cancel two big numbers each rounded to the logits' scale.
          loss[r] = t == ignore_index ? A(0) : (m - load(row[t])) + log_sum;
        }
      });
    });
  });
}

void cross_entropy_backward(DType dtype, DType target_dtype, const void* logits, const void* targets, const void* lse,
                            const void* grad_losses, void* dlogits, std::int64_t rows, std::int64_t vocab,
                            std::int64_t ignore_index) {
  TRIDENT_DISPATCH_FLOAT(dtype, "cross_entropy_backward", [&] {
    using A = acc_t<scalar_t>;
    dispatch_targets(target_dtype, "cross_entropy_backward", [&](auto target_tag) {
      using I = decltype(target_tag);
      const auto* x = static_cast<const scalar_t*>(logits);
      const auto* tg = static_cast<const I*>(targets);
      const auto* in_lse = static_cast<const A*>(lse);
      const auto* g = static_cast<const A*>(grad_losses);
      auto* dx = static_cast<scalar_t*>(dlogits);
      parallel_for(0, rows, row_grain(vocab), [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t r = lo; r < hi; ++r) {
          const scalar_t* row = x + r * vocab;
          scalar_t* drow = dx + r * vocab;
          const auto t = static_cast<std::int64_t>(tg[r]);
          if (t == ignore_index) {
            zero_row(drow, vocab);
            continue;
          }
          const A l = in_lse[r], gr = g[r];
          scaled_exp_row(row, drow, vocab, l, gr);
          drow[t] = store<scalar_t>((exp_acc<A>(load(row[t]) - l) - A(1)) * gr);
        }
      });
    });
  });
}

void vocab_parallel_forward(DType dtype, DType target_dtype, const void* logits, const void* targets, void* maxima,
                            void* target_logit, void* sum_exp, std::int64_t rows, std::int64_t cols,
                            std::int64_t valid, std::int64_t vocab_begin, std::int64_t ignore_index) {
  TRIDENT_DCHECK(valid >= 0 && valid <= cols, "vocab_parallel_forward: {} valid of {} columns", valid, cols);
  TRIDENT_DISPATCH_FLOAT(dtype, "vocab_parallel_cross_entropy", [&] {
    using A = acc_t<scalar_t>;
    dispatch_targets(target_dtype, "vocab_parallel_cross_entropy", [&](auto target_tag) {
      using I = decltype(target_tag);
      const auto* x = static_cast<const scalar_t*>(logits);
      const auto* tg = static_cast<const I*>(targets);
      auto* mx = static_cast<A*>(maxima);
      auto* zt = static_cast<A*>(target_logit);
      auto* se = static_cast<A*>(sum_exp);
      parallel_for(0, rows, row_grain(valid), [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t r = lo; r < hi; ++r) {
          const auto t = static_cast<std::int64_t>(tg[r]);
          if (t == ignore_index) {
            // 0, not -inf: every rank writes it, so the group's max is 0 and the rebase factor exp(0) = 1.
            mx[r] = zt[r] = se[r] = A(0);
            continue;
          }
          const scalar_t* row = x + r * cols;
          const A m = row_max(row, valid);  // -inf for an all-padding slice; its sum is then 0
          mx[r] = m;
          se[r] = row_sum_exp(row, valid, m);
          const std::int64_t local = t - vocab_begin;
          zt[r] = local >= 0 && local < valid ? load(row[local]) : A(0);
        }
      });
    });
  });
}

void vocab_parallel_rebase_sums(DType acc, void* sum_exp, const void* row_max, const void* group_max,
                                std::int64_t rows) {
  TRIDENT_DISPATCH_F32_F64(acc, "vocab_parallel_rebase_sums", [&] {
    auto* se = static_cast<scalar_t*>(sum_exp);
    const auto* mx = static_cast<const scalar_t*>(row_max);
    const auto* gm = static_cast<const scalar_t*>(group_max);
    for (std::int64_t r = 0; r < rows; ++r) se[r] *= exp_acc<scalar_t>(mx[r] - gm[r]);
  });
}

void vocab_parallel_backward(DType dtype, DType target_dtype, const void* logits, const void* targets,
                             const void* group_max, const void* group_sum, double scale, void* dlogits,
                             std::int64_t rows, std::int64_t cols, std::int64_t valid, std::int64_t vocab_begin,
                             std::int64_t ignore_index) {
  TRIDENT_DCHECK(valid >= 0 && valid <= cols, "vocab_parallel_backward: {} valid of {} columns", valid, cols);
  TRIDENT_DISPATCH_FLOAT(dtype, "vocab_parallel_cross_entropy_backward", [&] {
    using A = acc_t<scalar_t>;
    dispatch_targets(target_dtype, "vocab_parallel_cross_entropy_backward", [&](auto target_tag) {
      using I = decltype(target_tag);
      const auto* x = static_cast<const scalar_t*>(logits);
      const auto* tg = static_cast<const I*>(targets);
      const auto* gm = static_cast<const A*>(group_max);
      const auto* gs = static_cast<const A*>(group_sum);
      auto* dx = static_cast<scalar_t*>(dlogits);
      const A s = static_cast<A>(scale);
      parallel_for(0, rows, row_grain(cols), [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t r = lo; r < hi; ++r) {
          const scalar_t* row = x + r * cols;
          scalar_t* drow = dx + r * cols;
          const auto t = static_cast<std::int64_t>(tg[r]);
          if (t == ignore_index) {
            zero_row(drow, cols);
            continue;
          }
          // One division per row; the loop is the fused backward's, with exp(z − M) · (scale / S).
          const A m = gm[r], c = s / gs[r];
          scaled_exp_row(row, drow, valid, m, c);
          zero_row(drow + valid, cols - valid);
          const std::int64_t local = t - vocab_begin;
          if (local >= 0 && local < valid) drow[local] = store<scalar_t>(exp_acc<A>(load(row[local]) - m) * c - s);
        }
      });
    });
  });
}

std::int64_t count_targets(DType target_dtype, const void* targets, std::int64_t rows, std::int64_t vocab,
                           std::int64_t ignore_index, std::int64_t* bad_row, std::int64_t* bad_target) {
  std::int64_t count = 0;
  dispatch_targets(target_dtype, "cross_entropy", [&](auto target_tag) {
    using I = decltype(target_tag);
    const auto* tg = static_cast<const I*>(targets);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto t = static_cast<std::int64_t>(tg[r]);
      if (t == ignore_index) continue;
      if (t < 0 || t >= vocab) {
        *bad_row = r;
        *bad_target = t;
        count = -1;
        return;
      }
      ++count;
    }
  });
  return count;
}

}  // namespace trident::kernels::cpu
