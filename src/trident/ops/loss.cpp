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
  const std::int64_t vocab = logits.size(-1);
  TRIDENT_CHECK(vocab > 0 || targets.numel() == 0, "{}: logits of shape {} have an empty class dimension", op,
                logits.shape());
  std::int64_t bad_row = 0, bad_target = 0;
  const std::int64_t count = kernels::cpu::count_targets(targets.dtype(), targets.raw_data(), targets.numel(), vocab,
                                                         ignore_index, &bad_row, &bad_target);
  TRIDENT_CHECK(count >= 0, "{}: target {} at row {} is outside [0, V) for V = {} and is not ignore_index ({})", op,
                bad_target, bad_row, vocab, ignore_index);
  return count;
}
}  // namespace

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  require_cpu("cross_entropy", {&logits, &targets});
  CrossEntropyResult result;
  result.count = check_logits_targets(logits, targets, ignore_index, "cross_entropy");
  const DType out_dtype = loss_dtype(logits.dtype());
  result.losses = Tensor::empty(targets.shape(), out_dtype, logits.device());
  result.lse = Tensor::empty(targets.shape(), out_dtype, logits.device());
  kernels::cpu::cross_entropy_forward(logits.dtype(), targets.dtype(), logits.raw_data(), targets.raw_data(),
                                      result.losses.raw_data(), result.lse.raw_data(), targets.numel(),
                                      logits.size(-1), ignore_index);
  return result;
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& grad_losses, std::int64_t ignore_index) {
  constexpr std::string_view op = "cross_entropy_backward";
  check_defined(lse, op, "lse");
  check_defined(grad_losses, op, "grad_losses");
  require_cpu(op, {&logits, &targets, &lse, &grad_losses});
  check_logits_targets(logits, targets, ignore_index, op);
  const DType acc = loss_dtype(logits.dtype());
  TRIDENT_CHECK(lse.shape() == targets.shape() && grad_losses.shape() == targets.shape(),
                "{}: lse {} and grad_losses {} must have the targets' shape {}", op, lse.shape(), grad_losses.shape(),
                targets.shape());
  check_dtype(lse, acc, op, "lse");
  check_dtype(grad_losses, acc, op, "grad_losses");
  Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  kernels::cpu::cross_entropy_backward(logits.dtype(), targets.dtype(), logits.raw_data(), targets.raw_data(),
                                       lse.raw_data(), grad_losses.raw_data(), dlogits.raw_data(), targets.numel(),
                                       logits.size(-1), ignore_index);
  return dlogits;
}

}  // namespace trident::ops
