// Cross-entropy fused with log-softmax (the language-model loss).
//
// logits [..., V] (f32, f64, bf16, f16) and targets [...] (i32 or i64) with the
// same leading shape; rows are the flattened leading dimensions. A target equal
// to ignore_index marks a row that contributes nothing (padding, prompt
// tokens); any other target outside [0, V) is an error naming the row, the
// target and V. Arithmetic is f32 for f32/bf16/f16 logits and f64 for f64; the
// forward never materialises a softmax copy of the logits.
#pragma once

#include <cstdint>

#include "trident/core/tensor.h"

namespace trident::ops {

struct CrossEntropyResult {
  Tensor losses;           // targets' shape; per-row lse - logit[target], 0 where ignored; f32 (f64 for f64 logits)
  Tensor lse;              // targets' shape, same dtype: log-sum-exp of each row (kept for the backward)
  std::int64_t count = 0;  // rows whose target is not ignore_index
};

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100);

// dlogits in the logits' shape and dtype: (softmax(row) - onehot(target)) * grad_losses[row],
// zero for ignored rows. lse comes from the forward; grad_losses is the upstream
// gradient of each row's loss. Both have the targets' shape and the losses' dtype.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& grad_losses, std::int64_t ignore_index = -100);

}  // namespace trident::ops
