// Internal: the small kernels of matmul.cu that matmul.cpp (cuBLASLt host code) launches around a GEMM.
// C++17 and fmt-free (nvcc compiles matmul.cu). All run on the current device's compute stream, compute in
// Acc<T> (f32, f64 for f64) and round once on store.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cuda {

// c[i] = beta · c[i] for i < count; beta = 0 writes zeros without reading c (a GEMM with K = 0).
void launch_scale_matrix(DType dtype, void* c, std::int64_t count, double beta);

// dst[r, j] = beta · src[r, j] + bias[j] for r < rows, j < cols; beta = 0 reads only the bias (src may be
// null). dst may be src. Prepares C for a beta = 1 GEMM that adds the bias in its single rounding.
void launch_bias_into(DType dtype, const void* src, const void* bias, void* dst, std::int64_t rows, std::int64_t cols,
                      double beta);

// y[i] = gelu_tanh(x[i]) (GPT-2's tanh approximation, as kernels/cpu/activation), i < n.
void launch_gelu_tanh(DType dtype, const void* x, void* y, std::int64_t n);

// out[i] = Σ_k op(A)[i, k] for i < m, op(A) = A ([m, k]) or Aᵀ (A stored [k, m] when trans): the bias
// gradient of the GEMM whose A is the output gradient. A has a_dtype, out has out_dtype (equal, or f32);
// the sum runs in Acc<A> in a fixed order (deterministic).
void launch_sum_over_k(DType a_dtype, DType out_dtype, const void* a, void* out, std::int64_t m, std::int64_t k,
                       bool trans);

}  // namespace trident::kernels::cuda
