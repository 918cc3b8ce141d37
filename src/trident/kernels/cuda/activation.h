// CUDA kernels: GELU (tanh and erf), SiLU, SwiGLU, the fused bias + GELU-tanh, and tanh.
//
// Same signatures and semantics as kernels/cpu/activation.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// Grid-stride loops with 16-byte loads and stores when the arrays are 16-byte aligned.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/activation.h"

namespace trident::kernels::cuda {

using cpu::Activation;

void activation_forward(Activation act, DType dtype, const void* x, void* y, std::int64_t n);

void activation_backward(Activation act, DType dtype, const void* dy, const void* x, void* dx, std::int64_t n);

void tanh_forward(DType dtype, const void* x, void* y, std::int64_t n);

void tanh_backward(DType dtype, const void* dy, const void* y, void* dx, std::int64_t n);

void swiglu_forward(DType dtype, const void* gate, const void* up, void* out, std::int64_t n);

void swiglu_backward(DType dtype, const void* dy, const void* gate, const void* up, void* dgate, void* dup,
                     std::int64_t n);

void bias_gelu_tanh_forward(DType dtype, const void* x, const void* bias, void* y, std::int64_t rows,
                            std::int64_t cols);

void bias_gelu_tanh_backward(DType dtype, const void* dy, const void* x, const void* bias, void* dx,
                             std::int64_t rows, std::int64_t cols);

}  // namespace trident::kernels::cuda
