// CUDA kernels: LayerNorm and RMSNorm forward and backward, one row per warp (rows up to 1024 wide) or
// per block, statistics in acc_t (f32; f64 for f64). dweight/dbias are deterministic: per-chunk partial
// sums in a scratch buffer from the caching allocator, combined in a fixed order in f64 (no atomics).
//
// Signatures: kernels/norm.h. Semantics: kernels/cpu/norm.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cuda {
#include "trident/kernels/norm.h"
}  // namespace trident::kernels::cuda
