// Differentiable softmax over the last dimension (see ops/softmax.h).
#pragma once

#include "trident/autograd/variable.h"

namespace trident::autograd {

Variable softmax(const Variable& x);

}  // namespace trident::autograd
