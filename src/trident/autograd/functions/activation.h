// Differentiable activations (see ops/activation.h for the forward semantics,
// dtypes and numerics). Each backward node saves the forward's input(s), except
// tanh's, which saves its output (dx = dy (1 - y^2)).
#pragma once

#include "trident/autograd/variable.h"

namespace trident::autograd {

Variable gelu_tanh(const Variable& x);
Variable gelu(const Variable& x);
Variable silu(const Variable& x);
// tanh(x) (BERT's pooler).
Variable tanh(const Variable& x);
// silu(gate) * up; gate and up of one shape.
Variable swiglu(const Variable& gate, const Variable& up);
// gelu_tanh(x + bias), bias of shape [x.shape[-1]].
Variable bias_gelu_tanh(const Variable& x, const Variable& bias);

}  // namespace trident::autograd
