// CUDA kernels: Matmuls through cuBLASLt: f32, bf16 and f16 inputs with f32 accumulation (TF32 is never used for
// f32, so results follow the CPU reference to 1e-5), strided batches, broadcast operands.
//
// Same signatures and semantics as kernels/cpu/matmul.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/matmul.h"

namespace trident::kernels::cuda {

using cpu::GemmShape;

void gemm(DType ab_dtype, DType c_dtype, const GemmShape& shape, double alpha, const void* a, const void* b,
          double beta, void* c);

void broadcast_rows(DType dtype, const void* row, void* out, std::int64_t rows, std::int64_t cols);

}  // namespace trident::kernels::cuda
