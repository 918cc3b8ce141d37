// CUDA kernels: Fused AdamW and SGD over one flat tensor, and the sum of squares for the gradient norm;
// plus a multi-tensor AdamW (one launch for many tensors) that has no CPU twin.
//
// Signatures: kernels/optimizer.h. Semantics: kernels/cpu/optimizer.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// sum_of_squares returns a host value, so it synchronises that stream; its
// f64 sum is formed in a fixed order (per-block partials, then one block over
// them), so it is the same on every run, though not bit-equal to the CPU's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "trident/kernels/cpu/optimizer.h"

namespace trident::kernels::cuda {

using cpu::AdamWHyper;

#include "trident/kernels/optimizer.h"

// One tensor of adamw_step_multi: device pointers as adamw_step takes them, and
// its element count.
struct AdamWTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  void* param_copy = nullptr;  // null: this tensor has no copy
  std::int64_t n = 0;
};

// adamw_step for `count` tensors that share their dtypes and hyper-parameters,
// in one kernel launch (apex's multi_tensor_apply): the tensors are cut into
// chunks of at most 32768 elements, the chunk table (pointers and lengths) is
// built on the host and copied to the device once per call, and one block
// updates each chunk. Every element gets adamw_step's arithmetic exactly, so the
// result equals `count` adamw_step calls. `copy_dtype` applies to every non-null
// param_copy. `tensors` is host memory, free to reuse on return; the tensors
// must not overlap one another. Not yet used by ops:: (which steps one tensor at a time).
void adamw_step_multi(DType param_dtype, DType grad_dtype, DType copy_dtype, const AdamWTensor* tensors,
                      std::size_t count, const AdamWHyper& hyper);

}  // namespace trident::kernels::cuda
