// Fused optimizer steps and the gradient-norm helper (torch.optim semantics).
//
// Parameters and optimizer states are f32 master weights (or f64) updated in
// place; gradients may be f32, f64, bf16 or f16. Each step is one vectorised,
// multithreaded pass over memory, element-wise, so results do not depend on the
// thread count. The optim module's registry (optim/registry.h) builds its optimizers,
// clipping and loss scaling on top of these.
#pragma once

#include <cstdint>
#include <vector>

#include "trident/core/tensor.h"

namespace trident::ops {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  bool bias_correction = true;  // false: both corrections below are 1 (DeepSpeed's FusedAdam bias_correction)
};

// One torch.optim.AdamW step (single-tensor implementation, same operation order):
//   g = grad * grad_scale;  p *= 1 - lr wd;  m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g²;
//   p += -(lr / (1 - beta1^step)) m / (sqrt(v) / sqrt(1 - beta2^step) + eps).
// param: f32 or f64; exp_avg, exp_avg_sq: param's shape and dtype (zero before
// step 1); grad: param's shape, any floating dtype. step is 1-based. grad_scale
// multiplies the gradient first (loss-scale removal and clipping in one factor).
// param_copy, when given, receives the updated parameter converted to its dtype
// (bf16/f16/f32/f64, param's shape) in the same pass: the compute weights of
// mixed precision.
void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWConfig& config,
                std::int64_t step, double grad_scale = 1.0, Tensor* param_copy = nullptr);

// adamw_step of many tensors sharing one config: on a GPU one kernel launch
// over all of them (multi-tensor apply) when they share their dtypes (and
// either all have a param_copy of one dtype or none has), otherwise adamw_step
// per tensor. The results are adamw_step's.
struct AdamWTensors {
  Tensor* param;
  const Tensor* grad;
  Tensor* exp_avg;
  Tensor* exp_avg_sq;
  Tensor* param_copy = nullptr;  // optional, as adamw_step's
};
void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWConfig& config, std::int64_t step,
                      double grad_scale = 1.0);

// One torch.optim.SGD step: g = grad * grad_scale + weight_decay p; with momentum,
// buf = g on the first step and momentum buf + (1 - dampening) g afterwards;
// g = nesterov ? g + momentum buf : buf; p -= lr g.
// momentum_buf is undefined before the first step (PyTorch's None): it is then
// allocated with param's shape and dtype and initialised to g; a buffer allocated
// by the caller that holds no history yet (`fresh_buf`) is initialised to g too.
// Ignored when momentum == 0.
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr, double momentum,
              double weight_decay, double dampening = 0.0, bool nesterov = false, double grad_scale = 1.0,
              bool fresh_buf = false);

// Sum of squares of every element, accumulated in f64 in a fixed order (deterministic
// for any thread count). The global gradient norm is sqrt of these summed over
// parameters and ranks.
double sum_of_squares(const Tensor& t);

}  // namespace trident::ops
