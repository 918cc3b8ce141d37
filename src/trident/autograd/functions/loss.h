// Differentiable cross-entropy loss (see ops/loss.h for shapes, dtypes and errors).
#pragma once

#include <cstdint>

#include "trident/autograd/variable.h"

namespace trident::autograd {

enum class Reduction { mean, sum };

struct CrossEntropyOptions {
  std::int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
  // When > 0, loss = (sum of token losses) / normalizer whatever `reduction` says.
  // Pass the global batch's non-ignored token count so that each micro-batch's
  // loss is its share of the global token mean (docs/numerics.md#global-batch-semantics-and-the-loss) and gradients
  // summed over micro-batches and ranks equal those of the whole batch.
  double normalizer = 0;
};

// logits [..., V] (f32, f64, bf16, f16), targets [...] (i32/i64, no gradient) -> a scalar:
// mean over non-ignored rows (0, not NaN, when every row is ignored), their sum,
// or sum / normalizer. The loss is f32 for f32/bf16/f16 logits and f64 for f64;
// the per-row sum is accumulated in f64 in row order. The logits' gradient has
// their dtype; only the logits and the per-row log-sum-exp are saved for backward.
Variable cross_entropy(const Variable& logits, const Tensor& targets, const CrossEntropyOptions& options = {});

}  // namespace trident::autograd
