// CUDA kernels: Sums over all elements and over rows.
//
// Same signatures and semantics as kernels/cpu/reduce.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// Both accumulate in f64 over a fixed two-pass tree (no atomics), so results are deterministic;
// sum_all waits for the stream to return its value.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/reduce.h"

namespace trident::kernels::cuda {

double sum_all(DType dtype, const void* x, std::int64_t n);

void sum_rows(DType dtype, const void* x, void* out, std::int64_t rows, std::int64_t cols);

}  // namespace trident::kernels::cuda
