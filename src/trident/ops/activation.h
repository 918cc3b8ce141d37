// Activation functions (elementwise) and their backward ops.
//
// dtypes: f32, f64, bf16, f16 (bf16/f16 computed in f32, rounded once). Outputs
// have the input's shape and dtype. Backward ops take the upstream gradient dy
// (the output's shape and dtype) and the forward's input(s) (tanh: its output),
// and return new tensors. See kernels/cpu/activation.h for the numerics.
#pragma once

#include "trident/core/tensor.h"

namespace trident::ops {

// GPT-2's "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor gelu_tanh(const Tensor& x);
Tensor gelu_tanh_backward(const Tensor& dy, const Tensor& x);
// Exact GELU: 0.5 x (1 + erf(x / sqrt 2)).
Tensor gelu(const Tensor& x);
Tensor gelu_backward(const Tensor& dy, const Tensor& x);
// SiLU / swish: x sigmoid(x).
Tensor silu(const Tensor& x);
Tensor silu_backward(const Tensor& dy, const Tensor& x);
// tanh (BERT's pooler: tanh(dense(h[:, 0]))). The backward takes the forward's
// output y, not x: dx = dy (1 - y^2).
Tensor tanh(const Tensor& x);
Tensor tanh_backward(const Tensor& dy, const Tensor& y);

// LLaMA's MLP gate: silu(gate) * up; gate and up of one shape and dtype.
Tensor swiglu(const Tensor& gate, const Tensor& up);
struct SwigluGrads {
  Tensor dgate;
  Tensor dup;
};
SwigluGrads swiglu_backward(const Tensor& dy, const Tensor& gate, const Tensor& up);

// Fused bias + GELU-tanh (GPT-2's c_fc output): gelu_tanh(x[..., c] + bias[c]),
// bias of shape [x.shape[-1]]. The sum is kept in f32 (not rounded to bf16).
Tensor bias_gelu_tanh(const Tensor& x, const Tensor& bias);
struct BiasGeluGrads {
  Tensor dx;     // x's shape
  Tensor dbias;  // [C], the column sums of dx (f64 accumulation, fixed order)
};
BiasGeluGrads bias_gelu_tanh_backward(const Tensor& dy, const Tensor& x, const Tensor& bias);

}  // namespace trident::ops
