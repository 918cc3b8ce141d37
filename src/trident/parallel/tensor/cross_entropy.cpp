#include "trident/parallel/tensor/cross_entropy.h"

#include <cmath>

#include "trident/autograd/function.h"
#include "trident/ops/loss.h"

namespace trident::parallel {

Variable vocab_parallel_cross_entropy(const Variable& logits, const Tensor& targets, std::int64_t vocab_begin,
                                      std::int64_t vocab_size, const TpGroup& tp, std::int64_t ignore_index,
                                      double normalizer) {
  TRIDENT_CHECK(std::isfinite(normalizer) && normalizer >= 0,
                "vocab_parallel_cross_entropy: normalizer {} must be >= 0 (0 means: the mean over non-ignored rows)",
                normalizer);
  ops::VocabParallelPartials p =
      ops::vocab_parallel_cross_entropy_partials(logits.data(), targets, vocab_begin, vocab_size, ignore_index);
  Tensor group_max = p.row_max;
  if (tp && tp->size() > 1) {
    // The local sums are relative to the local maxima, so the logits are read once; rebasing them on
    // the group's maxima before the sum costs O(N), not a second pass over [N, V_local].
    group_max = p.row_max.clone();
    tp->all_reduce(group_max, dist::CollectiveOptions{dist::ReduceOp::max, 0, true})->wait();
    Tensor sums = p.sums();
    ops::vocab_parallel_rebase_sums(sums, p.row_max, group_max);
    tp->all_reduce(p.packed, dist::CollectiveOptions{dist::ReduceOp::sum, 0, true})->wait();
  }
  const Tensor group_sum = p.sums();

  // [N] values only: the row losses in f64, summed in row order as autograd::cross_entropy does.
  const std::vector<double> m = group_max.to_vector<double>(), s = group_sum.to_vector<double>(),
                            zy = p.target_logits().to_vector<double>();
  // to_vector reads back to the host first: a GPU converts floating dtypes only, so i32 targets widen there.
  const std::vector<std::int64_t> y = targets.to_vector<std::int64_t>();
  double total = 0;
  for (std::size_t r = 0; r < y.size(); ++r) {
    if (y[r] != ignore_index) total += std::log(s[r]) - (zy[r] - m[r]);
  }
  const double divisor = normalizer > 0 ? normalizer : static_cast<double>(p.count);  // 0: a mean over no rows
  Tensor loss = Tensor::full(Shape{}, divisor > 0 ? total / divisor : 0.0, p.packed.dtype(), logits.device());
  return autograd::make_result(
      loss, {logits}, "vocab_parallel_cross_entropy",
      [z = logits.data(), targets, group_max, group_sum, vocab_begin, vocab_size, ignore_index,
       divisor](const autograd::GradContext& ctx) {
        const double scale = divisor > 0 ? ctx.grad().item() / divisor : 0.0;
        return std::vector<Tensor>{ops::vocab_parallel_cross_entropy_backward(
            z, targets, group_max, group_sum, scale, vocab_begin, vocab_size, ignore_index)};
      });
}

}  // namespace trident::parallel
