// Vocabulary-parallel cross-entropy (Megatron; docs/parallelism.md#tensor-parallelism): each
// tensor-parallel rank holds the logits of its slice of the padded vocabulary,
// and the loss is computed without ever gathering the full logits.
//
// Forward, per row: one pass over the rank's slice gives its max m, its target
// logit (owning rank only) and Σ exp(z − m); then two collectives over the group,
// each for all N rows at once:
//   M    = all-reduce MAX of m                                          ([N])
//   z_y, S = all-reduce SUM of [target logits | Σ exp(z − m) · exp(m − M)] ([2N])
//   loss = log S − (z_y − M)
// Backward is local to each rank: (exp(z − M)/S − onehot(target if owned)) · dL,
// zero on padding columns and ignored rows. Row work runs in the CPU loss
// kernels (kernels/cpu/loss.h): f32 accumulation for f32/bf16/f16 logits, f64 for f64.
#pragma once

#include <cstdint>

#include "trident/parallel/tensor/mappings.h"

namespace trident::parallel {

// logits [N, V_local]: this rank's columns hold global vocabulary ids
// [vocab_begin, vocab_begin + V_local). Columns whose global id is >= vocab_size
// are padding (the vocabulary is padded to a multiple of 128·t) and take no part:
// they are excluded from the max and the sum of exponentials and get zero gradient.
// targets [N] (global ids, i32/i64; ignore_index rows contribute nothing; any other
// target outside [0, vocab_size) is an error naming row, target and vocab_size).
// Returns the mean over non-ignored rows (or the sum divided by `normalizer` when > 0),
// a scalar (f32, f64 for f64 logits) replicated on every rank of `tp`.
// `tp` may be null or of size 1 (then no communication at all).
//
// Every rank must pass the same targets, vocab_size, ignore_index and normalizer.
// A mean over no rows is 0 with a zero gradient. Backward saves the logits (not a
// copy), the targets and two [N] per-row values (M, S).
Variable vocab_parallel_cross_entropy(const Variable& logits, const Tensor& targets, std::int64_t vocab_begin,
                                      std::int64_t vocab_size, const TpGroup& tp,
                                      std::int64_t ignore_index = -100, double normalizer = 0);

}  // namespace trident::parallel
