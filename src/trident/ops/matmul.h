// Matrix products: batched GEMM with optional transposes, and the fused linear layer.
//
// matmul(a, b, trans_a, trans_b) = op(a) · op(b) over the trailing two dimensions:
//   a is [..., M, K] ([..., K, M] when trans_a), b is [..., K, N] ([..., N, K]
//   when trans_b); the result is [..., M, N]. The batch dimensions (all but the
//   last two) of a and b are equal, or one operand is 2-D and multiplies every
//   batch entry of the other (a weight shared over the batch).
// Dtypes: a and b alike, f32, f64, bf16 or f16; the result has their dtype
// (bf16 accumulates in f32 and rounds once; f16, which has no GEMM on this CPU,
// is widened exactly to f32, multiplied in f32 and rounded once).
// Backends and numerics: see kernels/cpu/matmul.h.
#pragma once

#include "trident/core/tensor.h"

namespace trident::ops {

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// out = alpha · op(a) · op(b) + beta · out, in place. `out` must already have
// the result's shape, and a's dtype — or f32 when a and b are bf16. beta = 0
// ignores out's contents; beta = 1 accumulates (gradient buffers). `out` must
// not overlap a or b.
void matmul_into(const Tensor& a, const Tensor& b, Tensor& out, bool trans_a = false, bool trans_b = false,
                 double alpha = 1.0, double beta = 0.0);

// y = x · weightᵀ + bias (torch.nn.Linear / Megatron layout): x [..., in],
// weight [out, in], bias [out] or undefined; y [..., out]. The bias is added by
// the GEMM's accumulation (one rounding in bf16), not by a second pass.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace trident::ops
