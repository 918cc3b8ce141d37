// CUDA kernels: Dropout with the counter-based RNG: the mask of element i is the CPU kernel's, bit for bit
// (same key, same counter), so a CUDA run drops exactly the elements a CPU run drops.
//
// Same signatures and semantics as kernels/cpu/dropout.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/dropout.h"

namespace trident::kernels::cuda {

void dropout(DType dtype, const void* x, void* y, const Shape& local, double p, const CounterRng& rng,
             const GlobalSlice& slice);

}  // namespace trident::kernels::cuda
