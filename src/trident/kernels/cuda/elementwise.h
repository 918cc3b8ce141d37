// CUDA kernels: Binary ops, scale, axpy, bias_add and the conversion between floating dtypes.
//
// Same signatures and semantics as kernels/cpu/elementwise.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// Grid-stride loops with 16-byte loads and stores when the arrays are 16-byte aligned.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/elementwise.h"

namespace trident::kernels::cuda {

using cpu::BinaryOp;

void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, std::int64_t n);

void scale(DType dtype, const void* a, double s, void* out, std::int64_t n);

void axpy(DType dtype, double alpha, const void* src, void* dst, std::int64_t n);

void bias_add(DType dtype, const void* x, const void* bias, void* out, std::int64_t rows, std::int64_t cols);

// dst = src converted from src_dtype to dst_dtype (n elements; both floating dtypes), as core's
// convert_elements does on the host: narrowing rounds once to nearest even (f64 -> bf16/f16
// included), widening is exact, NaN stays NaN, infinities and signed zeros are kept.
// src_dtype == dst_dtype is a plain copy.
void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n);

}  // namespace trident::kernels::cuda
