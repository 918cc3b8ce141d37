// CPU activation kernels: GELU (tanh approximation and exact), SiLU, SwiGLU,
// GELU-tanh with a fused bias, and tanh. Arguments are already validated by ops::;
// pointers are contiguous arrays of `n` elements (or [rows, cols] with a
// [cols] bias) of `dtype`. Backward kernels write (do not accumulate) dx.
//
// Numerics: computed in acc_t (f32 for f32/bf16/f16, f64 for f64), rounded once
// on store. In f32 the exponentials use an inline polynomial exp (about 1 ulp,
// argument clamped to [-87, 88] so no denormals arise) so the loops vectorise;
// f64 uses libm. GELU-tanh is evaluated as x * sigmoid(2u) with
// u = sqrt(2/pi) * (x + 0.044715 x^3), which equals 0.5 x (1 + tanh(u)) exactly
// and has no cancellation for negative x. Exact GELU uses libm's erfc
// (Phi(x) = erfc(-x / sqrt 2) / 2, accurate in the negative tail as well).
// tanh in f32: an odd Taylor polynomial (through x^17) for |x| < 0.55, where
// the exp form would cancel, and sign(x) (1 - e) / (1 + e) with
// e = exp(-2|x|) beyond (within 2 ulp of the exact tanh; saturates to +-1;
// NaN stays NaN); f64 uses libm. Its backward takes the forward's output y, not x:
// dx = dy (1 - y)(1 + y) (the factored form is accurate where |y| is near 1).
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cpu {

enum class Activation { gelu_tanh, gelu, silu };

#include "trident/kernels/activation.h"
}  // namespace trident::kernels::cpu
