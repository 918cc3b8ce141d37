// CUDA kernels: Permute and the dim-block copies behind split, concat and slice.
//
// Signatures: kernels/shape.h. Semantics: kernels/cpu/shape.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// permute supports up to 16 axes after merging the ones that stay adjacent (it fails clearly beyond).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "trident/core/shape.h"

namespace trident::kernels::cuda {
#include "trident/kernels/shape.h"
}  // namespace trident::kernels::cuda
