// CUDA kernels: Flash attention forward and backward: tiles of K/V streamed through shared memory with an online
// softmax, never materialising the [T, S] scores; lse (f32, [B, H, T]) saved for backward.
//
// Same signatures and semantics as kernels/cpu/attention.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/attention.h"

namespace trident::kernels::cuda {

using cpu::AttentionDims;

void attention_forward(DType dtype, const AttentionDims& dims, const void* q, const void* k, const void* v,
                       const void* mask, void* out, void* lse);

void attention_backward(DType dtype, const AttentionDims& dims, const void* q, const void* k, const void* v,
                        const void* mask, const void* out, const void* lse, const void* dout, void* dq, void* dk,
                        void* dv);

}  // namespace trident::kernels::cuda
