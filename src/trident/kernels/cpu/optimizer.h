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
  bool bias_correction = true;  // false: 1 − beta^step is taken as 1
  std::int64_t step = 1;  // 1-based
  double grad_scale = 1.0;
};

#include "trident/kernels/optimizer.h"
}  // namespace trident::kernels::cpu
