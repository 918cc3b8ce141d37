// Internal to kernels/cuda: the optimizer launchers (optimizer.cu) that
// optimizer.cpp calls once it has allocated their device memory. C++17 and fmt-free.
#pragma once

#include <cstddef>
#include <cstdint>

#include "trident/kernels/cpu/optimizer.h"

namespace trident::kernels::cuda::detail {

// adamw_step_multi's unit of work: one block updates `n` elements starting at
// these pointers (already advanced to the chunk's first element).
struct AdamWChunk {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  void* param_copy;  // may be null
  std::int64_t n;
};
inline constexpr std::int64_t kAdamWChunkElements = 32768;

// Copies the `count` chunks from host to `device_chunks` (device memory for
// `count` chunks) and launches the update; both on the compute stream.
void launch_adamw_step_multi(DType param_dtype, DType grad_dtype, DType copy_dtype, const AdamWChunk* host_chunks,
                             AdamWChunk* device_chunks, std::size_t count, const cpu::AdamWHyper& hyper);

// Device scratch for sum_of_squares: the per-block partials and the total.
std::size_t sum_of_squares_scratch_bytes();
// sum_of_squares (kernels/cpu/optimizer.h) with that scratch; synchronises the compute stream.
double launch_sum_of_squares(DType dtype, const void* x, std::int64_t n, void* scratch);

}  // namespace trident::kernels::cuda::detail
