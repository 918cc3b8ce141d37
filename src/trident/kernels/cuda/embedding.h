// CUDA kernels: Embedding lookup and its dense gradient (ids radix-sorted with their positions, then one
// warp per vocabulary row and 256-column tile sums that id's dout rows in position order: no atomics, the
// CPU's summation order, the same bits on every run). find_invalid_id synchronises (host result).
//
// Signatures: kernels/embedding.h. Semantics: kernels/cpu/embedding.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cuda {
#include "trident/kernels/embedding.h"
}  // namespace trident::kernels::cuda
