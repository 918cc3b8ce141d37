// CUDA kernels: Row softmax forward and backward.
//
// Same signatures and semantics as kernels/cpu/softmax.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// Rows of up to 1024 columns take one warp each (the forward keeps the row in registers); longer
// rows take a 512-thread block each and are read again per pass. A row of -inf gives zeros.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cuda {

void softmax_forward(DType dtype, const void* x, void* y, std::int64_t rows, std::int64_t cols);

void softmax_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t rows, std::int64_t cols);

}  // namespace trident::kernels::cuda
