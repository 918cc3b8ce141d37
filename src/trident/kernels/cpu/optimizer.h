// CPU optimizer kernels: fused AdamW and SGD steps, and the sum of squares
// used for global gradient-norm clipping.
//
// All arrays are contiguous with `n` elements; arguments are validated by ops::.
// param (and the optimizer states) are f32 or f64 and updated in place in that
// dtype's arithmetic; grad may be f32, f64, bf16 or f16 (widened on load, then
// multiplied by grad_scale). Each step is one pass over memory: every element
// is read and written once, the optional param_copy (bf16, f16, f32 or f64) is
// written from the updated parameter in the same pass.
// The work is split into blocks of 16 elements, so which code path (vector
// body or scalar tail) handles an element never depends on the thread count.
// sum_of_squares accumulates in f64 over fixed 4096-element blocks combined in
// order: deterministic for every thread count.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cpu {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  std::int64_t step = 1;  // 1-based
  double grad_scale = 1.0;
};

// PyTorch's single-tensor AdamW (decoupled weight decay), element by element:
//   g  = grad * grad_scale
//   p  = p * (1 - lr * wd)
//   m  = lerp(m, g, 1 - beta1)                   (m + w (g - m), or g - (g - m)(1 - w) when w >= 0.5)
//   v  = v * beta2 + ((1 - beta2) g) g
//   p  = p + (-lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Scalars are formed in f64 and rounded to the parameter's type. `copy_dtype`
// is ignored when param_copy is null.
void adamw_step(DType param_dtype, DType grad_dtype, DType copy_dtype, void* param, const void* grad, void* exp_avg,
                void* exp_avg_sq, void* param_copy, std::int64_t n, const AdamWHyper& hyper);

// PyTorch's SGD: g = grad * grad_scale + wd p; with momentum, buf = g on the
// first step (init_buf) and buf * momentum + (1 - dampening) g after; nesterov
// uses g + momentum * buf, otherwise buf; p = p - lr g.
// momentum_buf (param's dtype) may be null when momentum == 0.
void sgd_step(DType param_dtype, DType grad_dtype, void* param, const void* grad, void* momentum_buf, bool init_buf,
              std::int64_t n, double lr, double momentum, double weight_decay, double dampening, bool nesterov,
              double grad_scale);

// sum of x[i]^2 in f64.
double sum_of_squares(DType dtype, const void* x, std::int64_t n);

}  // namespace trident::kernels::cpu
