// Vocabulary-parallel cross-entropy (Megatron): each tensor-parallel rank holds
// the logits of its slice of the vocabulary [vocab_begin, vocab_begin + V/t),
// and the loss is computed without ever gathering full logits:
//   M   = all-reduce max over ranks of the row maxima
//   z_y = all-reduce sum of the target logit (only its owning rank contributes)
//   S   = all-reduce sum of Σ exp(z − M)
//   loss = log S − (z_y − M)
// Backward: (softmax − onehot(target on the owning rank)) · upstream gradient,
// local to each rank. Accumulation in f64 for f64 logits, f32 otherwise.
#pragma once

#include "trident/parallel/tensor/mappings.h"

namespace trident::parallel {

// logits [N, V_local] (this rank's vocabulary columns), targets [N] (global ids,
// i32/i64; ignore_index rows contribute nothing). Returns the mean over
// non-ignored rows (or the sum divided by `normalizer` when it is > 0), a scalar
// replicated on every rank of the group.
Variable vocab_parallel_cross_entropy(const Variable& logits, const Tensor& targets, std::int64_t vocab_begin,
                                      const TpGroup& tp, std::int64_t ignore_index = -100, double normalizer = 0);

}  // namespace trident::parallel
