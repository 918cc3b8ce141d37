// CUDA kernels: Binary ops, scale, axpy and bias_add.
//
// Same signatures and semantics as kernels/cpu/elementwise.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/elementwise.h"

namespace trident::kernels::cuda {

using cpu::BinaryOp;

void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, std::int64_t n);

void scale(DType dtype, const void* a, double s, void* out, std::int64_t n);

void axpy(DType dtype, double alpha, const void* src, void* dst, std::int64_t n);

void bias_add(DType dtype, const void* x, const void* bias, void* out, std::int64_t rows, std::int64_t cols);

}  // namespace trident::kernels::cuda
