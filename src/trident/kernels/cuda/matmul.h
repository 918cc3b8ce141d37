// CUDA kernels: matmuls through cuBLASLt: f32, f64, bf16 and f16 inputs, strided batches, broadcast operands,
// and fused epilogues (bias, bias + GELU-tanh, bias gradient) for the linear layers.
//
// Signatures: kernels/matmul.h. Semantics: kernels/cpu/matmul.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
//
// Numerics: f32 computes in f32 (CUBLAS_COMPUTE_32F, never TF32, so results follow the CPU reference to
// 1e-5), f64 in f64, bf16 and f16 inputs accumulate in f32 and C (bf16/f16, or f32) is rounded once after
// alpha and beta. Unlike the CPU, f16 has a native GEMM here (the CPU op widens f16 to f32 first; both
// multiply exact f16 values in f32 and round once). beta = 0 never reads C.
// Determinism: cuBLASLt gives bit-identical results for the same shape on the same GPU model; a result
// may change with the shape (another algorithm), so the split of a GEMM is part of its numerics.
// Costs: one cuBLASLt handle and a 32 MiB workspace per device (from the caching allocator), and a cache
// of matmul descriptors and heuristic answers keyed by shape, dtypes, transposes, batch, broadcast,
// beta = 0, epilogue and pointer alignment: after the first step a training loop makes no heuristic
// query. Errors name the shape and the cuBLAS status.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/matmul.h"

namespace trident::kernels::cuda {

using cpu::GemmShape;

// gemm and broadcast_rows. The CPU's extra gemm overload with a `backend` argument has no CUDA
// counterpart: ops call the common one.
#include "trident/kernels/matmul.h"

// --- fused epilogues (CUDA only; ops choose them where the device is CUDA) ---------------------------
//
// With P = alpha · op(A[b]) · op(B[b]) + beta · C[b] (as gemm; rows m < M, columns n < N):
//   none            C[b] = P
//   bias            C[b][m, n] = P[m, n] + bias[n]                   (one rounding)
//   bias_gelu_tanh  pre_activation[b][m, n] = P[m, n] + bias[n],  C[b][m, n] = gelu_tanh(P[m, n] + bias[n])
//   bias_grad       C[b] = P,  and bias_grad[m] = Σ_k op(A)[m, k]   (batch must be 1; written, not added)
// bias is [N] and bias_grad [M], pre_activation [batch, M, N]; all three have c_dtype, and pre_activation
// must not overlap A, B or C. gelu_tanh is GPT-2's 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))).
//
// What ops may use them for (y = x·Wᵀ + b, x [rows, in], W [out, in]; ops::linear and the MLP):
//   * forward of a linear layer: `bias` with a = x, b = W, trans_b, beta = 0 — one kernel instead of
//     broadcast_rows + a beta = 1 GEMM, the same single rounding;
//   * forward of c_fc + GELU: `bias_gelu_tanh`, saving pre_activation (= the linear output) for the
//     backward (kernels::cuda::activation_backward(gelu_tanh, dy, pre_activation, ...));
//   * weight gradient dW (+)= dyᵀ·x: a = dy with trans_a, b = x, c = dW, and `bias_grad` = db = Σ_rows dy
//     (M = out, K = rows) from the same pass over dy. With beta = 1 (gradient accumulation) db is still
//     written, not accumulated: accumulate it yourself.
// cuBLASLt fuses an epilogue where it supports the combination (bias and bias_gelu_tanh with f32, bf16 or
// f16 C, N a multiple of 8 for the GELU input; bias_grad with alpha = 1); any other combination (f64, odd
// N, an unsupported algorithm) is computed by the plain GEMM plus small kernels with the same semantics:
// the results agree to the output dtype's rounding, the fused path evaluating GELU before rounding.
enum class GemmEpilogue { none, bias, bias_gelu_tanh, bias_grad };

struct GemmEpilogueArgs {
  GemmEpilogue kind = GemmEpilogue::none;
  const void* bias = nullptr;      // bias, bias_gelu_tanh: [N]
  void* pre_activation = nullptr;  // bias_gelu_tanh: [batch, M, N]
  void* bias_grad = nullptr;       // bias_grad: [M]
};

void gemm_epilogue(DType ab_dtype, DType c_dtype, const GemmShape& shape, double alpha, const void* a, const void* b,
                   double beta, void* c, const GemmEpilogueArgs& epilogue);

// How many heuristic queries gemm has made on this process (all devices): tests check that a repeated
// step makes none after the first.
std::int64_t gemm_heuristic_queries() noexcept;

}  // namespace trident::kernels::cuda
