// Differentiable rotary position embedding (see ops/rope.h). Positions are
// constants; the gradient of x is the output gradient rotated back.
#pragma once

#include <cstdint>

#include "trident/autograd/variable.h"
#include "trident/kernels/rope_frequencies.h"

namespace trident::autograd {

// x [B, T, H, D] (D even, floating) -> the same shape, each head rotated by its position: row t is at
// position_offset + t (the KV-cache length when generating), or at positions[t] for an integer
// tensor positions [T] (positions[b, t] for [B, T]).
Variable rope(const Variable& x, std::int64_t position_offset, const RopeFrequencies& freq = {});
Variable rope(const Variable& x, const Tensor& positions, const RopeFrequencies& freq = {});

}  // namespace trident::autograd
