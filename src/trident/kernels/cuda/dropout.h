// CUDA kernels: Dropout with the counter-based RNG: the mask of element i is the CPU kernel's, bit for bit
// (same key, same counter), so a CUDA run drops exactly the elements a CPU run drops.
//
// Signatures: kernels/dropout.h. Semantics: kernels/cpu/dropout.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"
#include "trident/core/rng.h"
#include "trident/core/shape.h"

namespace trident::kernels::cuda {
#include "trident/kernels/dropout.h"
}  // namespace trident::kernels::cuda
