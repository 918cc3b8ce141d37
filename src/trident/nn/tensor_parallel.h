// TensorParallel: a module's place in a tensor-parallel group, and the region
// boundaries of Megatron's intra-layer model parallelism (docs/parallelism.md#tensor-parallelism).
//
// A transformer block alternates between two regions:
//   replicated region  norms, dropout, residual adds. Activations [B, T, D] are
//                      the same on every rank — or, with sequence parallelism,
//                      each rank holds its T/t slice of the sequence.
//   tensor region      between a column-parallel and a row-parallel layer:
//                      every rank holds the full sequence and its share of the
//                      heads or of the MLP's hidden units.
// enter_tp_region crosses from the first to the second (identity forward and
// all-reduce backward, or all-gather of the sequence and reduce-scatter back);
// exit_tp_region crosses back (all-reduce, or reduce-scatter of the sequence).
// That is 2 collectives forward and 2 backward per block, each of B·T·D elements.
//
// A parameter used in the replicated region under sequence parallelism (norm
// weights, row-parallel biases, position embeddings) sees only its rank's part
// of the sequence, so its gradient is a partial sum: replicated_view() adds the
// all-reduce over the group to its backward.
#pragma once

#include <memory>

#include "trident/dist/group.h"
#include "trident/nn/context.h"
#include "trident/nn/module.h"
#include "trident/parallel/tensor/mappings.h"

namespace trident::nn {

// The tensor-parallel group (dist::Group: null, no tensor parallelism) and whether the replicated region
// splits the sequence over it.
struct TensorParallel : dist::Group {
  bool sequence_parallel = false;

  bool sequence_split() const { return sequence_parallel && active(); }
};

// The vocabulary a vocabulary-parallel layer holds: V rounded up to a multiple of
// divisible_by·t (Megatron's make-vocab-size-divisible-by; 128 by default).
std::int64_t padded_vocab_size(std::int64_t vocab, int tp_size, std::int64_t divisible_by = 128);

Variable enter_tp_region(const Variable& x, const TensorParallel& tp);
Variable exit_tp_region(const Variable& x, const TensorParallel& tp);

// A replicated parameter's compute view; under sequence parallelism its
// gradient is all-reduced over the tensor-parallel group.
Variable replicated_view(const Parameter& p, const TensorParallel& tp, const ForwardContext& ctx);

// The forward context of the replicated region: under sequence parallelism,
// dropout masks and positions refer to this rank's slice of the sequence.
ForwardContext sequence_context(const ForwardContext& ctx, const TensorParallel& tp, std::int64_t seq_len);

}  // namespace trident::nn
