// Differentiable rotary position embedding (see ops/rope.h). Positions are
// constants; the gradient of x is the output gradient rotated back.
#pragma once

#include <cstdint>

#include "trident/autograd/variable.h"
#include "trident/kernels/rope_frequencies.h"

namespace trident::autograd {

Variable rope(const Variable& x, std::int64_t position_offset, const RopeFrequencies& freq = {});
Variable rope(const Variable& x, const Tensor& positions, const RopeFrequencies& freq = {});

}  // namespace trident::autograd
