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

// Vocabulary-parallel cross-entropy: one tensor-parallel rank's share of the
// work, for parallel/tensor/cross_entropy.h, which runs the collectives between
// the steps. logits [N, V_local] (f32, f64, bf16, f16) hold the global
// vocabulary ids [vocab_begin, vocab_begin + V_local); ids >= vocab_size are
// padding and are never read. targets [N] (i32/i64) hold global ids, each
// ignore_index or in [0, vocab_size), else an error naming the row, the target
// and vocab_size. Per-row tensors are in the loss dtype (f32, f64 for f64 logits).
struct VocabParallelPartials {
  Tensor row_max;          // [N] max over this rank's real columns (-inf when it has none; 0 for ignored rows)
  Tensor packed;           // [2N] target logits (0 unless this rank owns the target), then Σ exp(z − row_max)
  std::int64_t count = 0;  // rows whose target is not ignore_index
  Tensor target_logits() const { return packed.slice0(0, packed.size(0) / 2); }
  Tensor sums() const { return packed.slice0(packed.size(0) / 2, packed.size(0)); }
};

// One pass over the logits: row maxima, target logits and sums of exponentials.
VocabParallelPartials vocab_parallel_cross_entropy_partials(const Tensor& logits, const Tensor& targets,
                                                            std::int64_t vocab_begin, std::int64_t vocab_size,
                                                            std::int64_t ignore_index = -100);

// In place: sums[r] *= exp(row_max[r] − group_max[r]), rebasing each rank's sums on
// the group's maxima (all [N], loss dtype) so that they can be added up.
void vocab_parallel_rebase_sums(Tensor& sums, const Tensor& row_max, const Tensor& group_max);

// dlogits in the logits' shape and dtype: (exp(z − group_max)/group_sum − onehot(target
// if this rank owns it)) · scale; zero on padding columns and on ignored rows.
// group_max and group_sum are the group's per-row maxima and sums of exp(z − group_max).
Tensor vocab_parallel_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& group_max,
                                             const Tensor& group_sum, double scale, std::int64_t vocab_begin,
                                             std::int64_t vocab_size, std::int64_t ignore_index = -100);

}  // namespace trident::ops
