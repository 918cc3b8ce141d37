// CUDA kernels: LayerNorm and RMSNorm forward and backward, one row per warp (rows up to 1024 wide) or
// per block, statistics in acc_t (f32; f64 for f64). dweight/dbias are deterministic: per-chunk partial
// sums in a scratch buffer from the caching allocator, combined in a fixed order in f64 (no atomics).
//
// Same signatures and semantics as kernels/cpu/norm.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/norm.h"

namespace trident::kernels::cuda {

void layer_norm_forward(DType dtype, const void* x, const void* weight, const void* bias, void* y, void* mean,
                        void* rstd, std::int64_t rows, std::int64_t cols, double eps);

void layer_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* mean,
                         const void* rstd, void* dx, void* dweight, void* dbias, std::int64_t rows, std::int64_t cols);

void rms_norm_forward(DType dtype, const void* x, const void* weight, void* y, void* rstd, std::int64_t rows,
                      std::int64_t cols, double eps);

void rms_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* rstd, void* dx,
                       void* dweight, std::int64_t rows, std::int64_t cols);

}  // namespace trident::kernels::cuda
