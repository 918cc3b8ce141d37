// CUDA kernels: Sums over all elements and over rows.
//
// Signatures: kernels/reduce.h. Semantics: kernels/cpu/reduce.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// Both accumulate in f64 over a fixed two-pass tree (no atomics), so results are deterministic;
// sum_all waits for the stream to return its value.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cuda {
#include "trident/kernels/reduce.h"
}  // namespace trident::kernels::cuda
