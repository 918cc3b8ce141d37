// CUDA kernels: Fused AdamW and SGD over one flat tensor, and the sum of squares for the gradient norm.
//
// Same signatures and semantics as kernels/cpu/optimizer.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/optimizer.h"

namespace trident::kernels::cuda {

using cpu::AdamWHyper;

void adamw_step(DType param_dtype, DType grad_dtype, DType copy_dtype, void* param, const void* grad, void* exp_avg,
                void* exp_avg_sq, void* param_copy, std::int64_t n, const AdamWHyper& hyper);

void sgd_step(DType param_dtype, DType grad_dtype, void* param, const void* grad, void* momentum_buf, bool init_buf,
              std::int64_t n, double lr, double momentum, double weight_decay, double dampening, bool nesterov,
              double grad_scale);

double sum_of_squares(DType dtype, const void* x, std::int64_t n);

}  // namespace trident::kernels::cuda
