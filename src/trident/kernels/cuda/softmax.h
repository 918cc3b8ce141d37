// CUDA kernels: Row softmax forward and backward.
//
// Signatures: kernels/softmax.h. Semantics: kernels/cpu/softmax.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// Rows of up to 1024 columns take one warp each (the forward keeps the row in registers); longer
// rows take a 512-thread block each and are read again per pass. A row of -inf gives zeros.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cuda {
#include "trident/kernels/softmax.h"
}  // namespace trident::kernels::cuda
