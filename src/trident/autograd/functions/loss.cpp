#include "trident/autograd/functions/loss.h"

#include <cmath>

#include "trident/autograd/function.h"
#include "trident/ops/loss.h"

namespace trident::autograd {

Variable cross_entropy(const Variable& logits, const Tensor& targets, const CrossEntropyOptions& options) {
  TRIDENT_CHECK(std::isfinite(options.normalizer) && options.normalizer >= 0,
                "cross_entropy: normalizer {} must be >= 0 (0 means: use the reduction)", options.normalizer);
  ops::CrossEntropyResult r = ops::cross_entropy(logits.data(), targets, options.ignore_index);
  double total = 0;
  for (double v : r.losses.flatten().to_vector<double>()) total += v;
  // divisor 0: a mean over no tokens, defined as 0 with a zero gradient.
  double divisor = 1.0;
  if (options.normalizer > 0) {
    divisor = options.normalizer;
  } else if (options.reduction == Reduction::mean) {
    divisor = static_cast<double>(r.count);
  }
  Tensor loss = Tensor::full(Shape{}, divisor > 0 ? total / divisor : 0.0, r.losses.dtype(), logits.device());
  Tensor saved_logits = logits.data();
  const std::int64_t ignore_index = options.ignore_index;
  return make_result(loss, {logits}, "cross_entropy",
                     [saved_logits, targets, lse = r.lse, divisor, ignore_index](const GradContext& ctx) {
                       const double g = divisor > 0 ? ctx.grad().item() / divisor : 0.0;
                       Tensor grad_losses = Tensor::full(lse.shape(), g, lse.dtype(), lse.device());
                       return std::vector<Tensor>{
                           ops::cross_entropy_backward(saved_logits, targets, lse, grad_losses, ignore_index)};
                     });
}

}  // namespace trident::autograd
