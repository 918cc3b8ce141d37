// Megatron's conjugate region operators for tensor parallelism, as autograd
// functions over the tensor-parallel group (docs/parallelism.md#tensor-parallelism):
//
//   operator         forward                     backward
//   copy_to_tp       identity                    all-reduce
//   reduce_from_tp   all-reduce                  identity
//   scatter_to_tp    keep this rank's chunk of   all-gather along the last dim
//                    the last dim
//   gather_from_tp   all-gather along the last   keep this rank's chunk of
//                    dim                         the last dim
//
// and for sequence parallelism, along the sequence dimension (dimension 1 of
// trident's [batch, seq, hidden] activations):
//
//   scatter_to_sp        keep this rank's chunk   all-gather
//   gather_from_sp       all-gather               reduce-scatter
//   reduce_scatter_to_sp reduce-scatter           all-gather
//
// A column-parallel linear layer sits between copy_to_tp (gather_from_sp under
// sequence parallelism) and optionally gather_from_tp; a row-parallel one takes
// a split input and ends in reduce_from_tp (reduce_scatter_to_sp). The split
// dimension must divide by the group size. Every operator is the identity for
// a null or one-rank group.
#pragma once

#include <memory>

#include "trident/autograd/variable.h"
#include "trident/dist/communicator.h"

namespace trident::parallel {

using autograd::Variable;
using TpGroup = std::shared_ptr<dist::Communicator>;

Variable copy_to_tp(const Variable& x, const TpGroup& tp);
Variable reduce_from_tp(const Variable& x, const TpGroup& tp);
Variable scatter_to_tp(const Variable& x, const TpGroup& tp);
Variable gather_from_tp(const Variable& x, const TpGroup& tp);

Variable scatter_to_sp(const Variable& x, const TpGroup& tp, std::int64_t dim = 1);
Variable gather_from_sp(const Variable& x, const TpGroup& tp, std::int64_t dim = 1);
Variable reduce_scatter_to_sp(const Variable& x, const TpGroup& tp, std::int64_t dim = 1);

// Tensor-level helpers (no autograd): this rank's chunk of dimension `dim`, the
// all-gather of every rank's chunk back into the full dimension, and the
// reduce-scatter (sum) that leaves each rank its chunk. A one-rank group is the
// identity.
Tensor split_dim(const Tensor& x, std::int64_t dim, int rank, int size);
Tensor all_gather_dim(const Tensor& x, std::int64_t dim, dist::Communicator& tp);
Tensor reduce_scatter_dim(const Tensor& x, std::int64_t dim, dist::Communicator& tp);

}  // namespace trident::parallel
