// Differentiable matrix products (forward semantics and argument rules in ops/matmul.h).
#pragma once

#include "trident/autograd/variable.h"

namespace trident::autograd {

// op(a) · op(b) over the last two dimensions, batched; a 2-D operand is shared
// by every batch entry of the other, and its gradient sums over the batch.
Variable matmul(const Variable& a, const Variable& b, bool trans_a = false, bool trans_b = false);

// y = x · weightᵀ + bias with weight [out, in] (torch.nn.Linear / Megatron
// layout), x [..., in], bias [out] or an undefined Variable for none.
// Backward over the flattened rows: dx = dy · W, dW = dyᵀ · x, dbias = Σ_rows dy.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias = {});

}  // namespace trident::autograd
