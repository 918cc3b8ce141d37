// CUDA kernels: Rotary position embedding (positions is a host array, as for the CPU kernel).
//
// Same signatures and semantics as kernels/cpu/rope.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// Consecutive positions (any position offset) need no copy; other positions are copied to the device,
// which waits for the stream. cos/sin are computed on the device in f64, as the CPU does on the host.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/rope.h"

namespace trident::kernels::cuda {

void rope(DType dtype, const void* x, void* out, const std::int64_t* positions, std::int64_t batch, std::int64_t seq,
          std::int64_t heads, std::int64_t head_dim, const RopeFrequencies& freq, bool inverse);

}  // namespace trident::kernels::cuda
