// Elementwise ops on tensors of one shape (bias_add broadcasts over rows).
// Floating dtypes f32, f64, bf16, f16; results have the inputs' dtype.
#pragma once

#include "trident/core/tensor.h"

namespace trident::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& a, double s);
// x[..., c] + bias[c]; bias has shape [x.shape[-1]].
Tensor bias_add(const Tensor& x, const Tensor& bias);
// Converts to `dtype` (returns `x` itself when already of that dtype).
Tensor cast(const Tensor& x, DType dtype);

// In place: dst += alpha * src (same shape and dtype).
void add_(Tensor& dst, const Tensor& src, double alpha = 1.0);
// In place: dst *= s.
void scale_(Tensor& dst, double s);

}  // namespace trident::ops
