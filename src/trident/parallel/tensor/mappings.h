// Megatron's conjugate region operators for tensor parallelism, as autograd
// functions over the tensor-parallel group (REFERENCE.md §2):
//
//   operator         forward                     backward
//   copy_to_tp       identity                    all-reduce
//   reduce_from_tp   all-reduce                  identity
//   scatter_to_tp    keep this rank's chunk of   all-gather along the last dim
//                    the last dim
//   gather_from_tp   all-gather along the last   keep this rank's chunk of
//                    dim                         the last dim
//
// A column-parallel linear layer sits between copy_to_tp and (optionally)
// gather_from_tp; a row-parallel one takes scatter_to_tp's (or a column
// layer's) split input and ends in reduce_from_tp. The last dimension must
// divide by the group size.
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

// Tensor-level helpers (no autograd): this rank's chunk of the last dimension,
// and the all-gather of every rank's chunk back into the full last dimension.
Tensor split_last_dim(const Tensor& x, int rank, int size);
Tensor all_gather_last_dim(const Tensor& x, dist::Communicator& tp);

}  // namespace trident::parallel
