// CUDA kernels: Binary ops, scale, axpy, bias_add and the conversion between floating dtypes.
//
// Signatures: kernels/elementwise.h. Semantics: kernels/cpu/elementwise.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// Grid-stride loops with 16-byte loads and stores when the arrays are 16-byte aligned.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/elementwise.h"

namespace trident::kernels::cuda {

using cpu::BinaryOp;

#include "trident/kernels/elementwise.h"

// dst = src converted from src_dtype to dst_dtype (n elements; both floating dtypes), as core's
// convert_elements does on the host: narrowing rounds once to nearest even (f64 -> bf16/f16
// included), widening is exact, NaN stays NaN, infinities and signed zeros are kept.
// src_dtype == dst_dtype is a plain copy.
void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n);

}  // namespace trident::kernels::cuda
