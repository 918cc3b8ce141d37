// Differentiable softmax over the last dimension (see ops/softmax.h).
#pragma once

#include "trident/autograd/variable.h"

namespace trident::autograd {

// x [..., N] (floating) -> probabilities [..., N] summing to 1 along the last dimension; a row that is
// entirely -inf gives zeros. Backward uses the saved output, not x.
Variable softmax(const Variable& x);

}  // namespace trident::autograd
