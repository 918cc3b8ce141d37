// Differentiable rotary position embedding (see ops/rope.h). Positions are
// constants; the gradient of x is the output gradient rotated back.
#pragma once

#include <cstdint>

#include "trident/autograd/variable.h"

namespace trident::autograd {

Variable rope(const Variable& x, std::int64_t position_offset, double theta = 10000.0);
Variable rope(const Variable& x, const Tensor& positions, double theta = 10000.0);

}  // namespace trident::autograd
