// CUDA kernels: GELU (tanh and erf), SiLU, SwiGLU, the fused bias + GELU-tanh, and tanh.
//
// Signatures: kernels/activation.h. Semantics: kernels/cpu/activation.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// Grid-stride loops with 16-byte loads and stores when the arrays are 16-byte aligned.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/activation.h"

namespace trident::kernels::cuda {

using cpu::Activation;

#include "trident/kernels/activation.h"
}  // namespace trident::kernels::cuda
