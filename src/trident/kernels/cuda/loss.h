// CUDA kernels: Softmax cross-entropy over the vocabulary, one row per block, never writing fp32 probabilities:
// forward keeps only lse per row, backward recomputes softmax into dlogits. Plus the vocab-parallel
// (TP) pieces. count_targets synchronises (host result).
//
// Signatures: kernels/loss.h. Semantics: kernels/cpu/loss.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cuda {
#include "trident/kernels/loss.h"
}  // namespace trident::kernels::cuda
