#include "trident/ops/loss.h"

#include <algorithm>

#include "trident/kernels/cpu/loss.h"
#include "trident/ops/dispatch.h"

namespace trident::ops {

namespace {
DType loss_dtype(DType logits) { return logits == DType::f64 ? DType::f64 : DType::f32; }

// Checks logits/targets and returns the number of non-ignored rows.
std::int64_t check_logits_targets(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                                  std::string_view op) {
  check_defined(logits, op, "logits");
  check_defined(targets, op, "targets");
  check_floating(logits, op, "logits");
  TRIDENT_CHECK(targets.dtype() == DType::i32 || targets.dtype() == DType::i64,
                "{}: targets must be i32 or i64, got {} (shape {})", op, targets.dtype(), targets.shape());
  TRIDENT_CHECK(logits.rank() >= 1 && logits.rank() == targets.rank() + 1 &&
                    std::equal(targets.shape().begin(), targets.shape().end(), logits.shape().begin()),
                "{}: logits of shape {} do not match targets of shape {} (expected logits [..., V] with targets [...])",
                op, logits.shape(), targets.shape());
  check_same_device(logits, targets, op);
  const std::int64_t vocab = logits.size(-1);
  TRIDENT_CHECK(vocab > 0 || targets.numel() == 0, "{}: logits of shape {} have an empty class dimension", op,
                logits.shape());
  std::int64_t bad_row = 0, bad_target = 0;
  const std::int64_t count = TRIDENT_KERNEL(targets.device(), count_targets, targets.dtype(), targets.raw_data(),
                                            targets.numel(), vocab, ignore_index, &bad_row, &bad_target);
  TRIDENT_CHECK(count >= 0, "{}: target {} at row {} is outside [0, V) for V = {} and is not ignore_index ({})", op,
                bad_target, bad_row, vocab, ignore_index);
  return count;
}

// Checks a vocabulary slice's logits [N, V_local] and targets [N]; returns the non-ignored row count.
std::int64_t check_vocab_slice(const Tensor& logits, const Tensor& targets, std::int64_t vocab_begin,
                               std::int64_t vocab_size, std::int64_t ignore_index, std::string_view op) {
  check_defined(logits, op, "logits");
  check_defined(targets, op, "targets");
  check_floating(logits, op, "logits");
  TRIDENT_CHECK(targets.dtype() == DType::i32 || targets.dtype() == DType::i64,
                "{}: targets must be i32 or i64, got {} (shape {})", op, targets.dtype(), targets.shape());
  TRIDENT_CHECK(logits.rank() == 2 && targets.rank() == 1 && targets.size(0) == logits.size(0),
                "{}: logits of shape {} do not match targets of shape {} (expected logits [N, V_local], targets [N])",
                op, logits.shape(), targets.shape());
  TRIDENT_CHECK(vocab_size > 0 && vocab_begin >= 0, "{}: vocab_begin {} must be >= 0 and vocab_size {} > 0", op,
                vocab_begin, vocab_size);
  check_same_device(logits, targets, op);
  std::int64_t bad_row = 0, bad_target = 0;
  const std::int64_t count = TRIDENT_KERNEL(targets.device(), count_targets, targets.dtype(), targets.raw_data(),
                                            targets.numel(), vocab_size, ignore_index, &bad_row, &bad_target);
  TRIDENT_CHECK(count >= 0,
                "{}: target {} at row {} is outside [0, vocab_size) for vocab_size = {} and is not ignore_index ({})",
                op, bad_target, bad_row, vocab_size, ignore_index);
  return count;
}

// Columns of this slice that are real vocabulary ids; the padding is a suffix of the last slices.
std::int64_t valid_columns(const Tensor& logits, std::int64_t vocab_begin, std::int64_t vocab_size) {
  return std::clamp<std::int64_t>(vocab_size - vocab_begin, 0, logits.size(1));
}

void check_per_row(const Tensor& t, const Tensor& targets, DType acc, std::string_view op, std::string_view arg) {
  check_defined(t, op, arg);
  TRIDENT_CHECK(t.shape() == targets.shape(), "{}: {} of shape {} must have the per-row shape {}", op, arg,
                t.shape(), targets.shape());
  check_dtype(t, acc, op, arg);
  check_same_device(t, targets, op);
}
}  // namespace

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  CrossEntropyResult result;
  result.count = check_logits_targets(logits, targets, ignore_index, "cross_entropy");
  const DType out_dtype = loss_dtype(logits.dtype());
  result.losses = Tensor::empty(targets.shape(), out_dtype, logits.device());
  result.lse = Tensor::empty(targets.shape(), out_dtype, logits.device());
  TRIDENT_KERNEL(logits.device(), cross_entropy_forward, logits.dtype(), targets.dtype(), logits.raw_data(),
                 targets.raw_data(), result.losses.raw_data(), result.lse.raw_data(), targets.numel(),
                 logits.size(-1), ignore_index);
  return result;
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& grad_losses, std::int64_t ignore_index) {
  constexpr std::string_view op = "cross_entropy_backward";
  check_defined(lse, op, "lse");
  check_defined(grad_losses, op, "grad_losses");
  check_logits_targets(logits, targets, ignore_index, op);
  const DType acc = loss_dtype(logits.dtype());
  TRIDENT_CHECK(lse.shape() == targets.shape() && grad_losses.shape() == targets.shape(),
                "{}: lse {} and grad_losses {} must have the targets' shape {}", op, lse.shape(), grad_losses.shape(),
                targets.shape());
  check_dtype(lse, acc, op, "lse");
  check_dtype(grad_losses, acc, op, "grad_losses");
  check_same_device(lse, logits, op);
  check_same_device(grad_losses, logits, op);
  Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  TRIDENT_KERNEL(logits.device(), cross_entropy_backward, logits.dtype(), targets.dtype(), logits.raw_data(),
                 targets.raw_data(), lse.raw_data(), grad_losses.raw_data(), dlogits.raw_data(), targets.numel(),
                 logits.size(-1), ignore_index);
  return dlogits;
}

VocabParallelPartials vocab_parallel_cross_entropy_partials(const Tensor& logits, const Tensor& targets,
                                                            std::int64_t vocab_begin, std::int64_t vocab_size,
                                                            std::int64_t ignore_index) {
  constexpr std::string_view op = "vocab_parallel_cross_entropy";
  VocabParallelPartials p;
  p.count = check_vocab_slice(logits, targets, vocab_begin, vocab_size, ignore_index, op);
  const std::int64_t rows = logits.size(0);
  const DType acc = loss_dtype(logits.dtype());
  p.row_max = Tensor::empty({rows}, acc, logits.device());
  p.packed = Tensor::empty({2 * rows}, acc, logits.device());
  TRIDENT_KERNEL(logits.device(), vocab_parallel_forward, logits.dtype(), targets.dtype(), logits.raw_data(),
                 targets.raw_data(), p.row_max.raw_data(), p.target_logits().raw_data(), p.sums().raw_data(), rows,
                 logits.size(1), valid_columns(logits, vocab_begin, vocab_size), vocab_begin, ignore_index);
  return p;
}

void vocab_parallel_rebase_sums(Tensor& sums, const Tensor& row_max, const Tensor& group_max) {
  constexpr std::string_view op = "vocab_parallel_rebase_sums";
  check_per_row(row_max, sums, sums.dtype(), op, "row_max");
  check_per_row(group_max, sums, sums.dtype(), op, "group_max");
  TRIDENT_KERNEL(sums.device(), vocab_parallel_rebase_sums, sums.dtype(), sums.raw_data(), row_max.raw_data(),
                 group_max.raw_data(), sums.numel());
}

Tensor vocab_parallel_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& group_max,
                                             const Tensor& group_sum, double scale, std::int64_t vocab_begin,
                                             std::int64_t vocab_size, std::int64_t ignore_index) {
  constexpr std::string_view op = "vocab_parallel_cross_entropy_backward";
  check_vocab_slice(logits, targets, vocab_begin, vocab_size, ignore_index, op);
  const DType acc = loss_dtype(logits.dtype());
  check_per_row(group_max, targets, acc, op, "group_max");
  check_per_row(group_sum, targets, acc, op, "group_sum");
  Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  TRIDENT_KERNEL(logits.device(), vocab_parallel_backward, logits.dtype(), targets.dtype(), logits.raw_data(),
                 targets.raw_data(), group_max.raw_data(), group_sum.raw_data(), scale, dlogits.raw_data(),
                 logits.size(0), logits.size(1), valid_columns(logits, vocab_begin, vocab_size), vocab_begin,
                 ignore_index);
  return dlogits;
}

}  // namespace trident::ops
