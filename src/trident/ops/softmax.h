// Softmax over the last dimension. Floating dtypes f32, f64, bf16, f16
// (bf16/f16 computed in f32); the result has the input's dtype and shape.
// A row that is entirely -inf yields zeros rather than NaN.
#pragma once

#include "trident/core/tensor.h"

namespace trident::ops {

// y[..., i] = exp(x[..., i] - max) / sum_j exp(x[..., j] - max); x of rank ≥ 1.
Tensor softmax(const Tensor& x);
// dx = y * (dy - sum(dy * y, last dim)), from the forward output y and its gradient dy.
Tensor softmax_backward(const Tensor& y, const Tensor& dy);

}  // namespace trident::ops
