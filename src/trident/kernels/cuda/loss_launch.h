// Internal to kernels/cuda: the loss launcher (loss.cu) that loss.cpp calls once
// it has allocated the launcher's scratch. C++17 and fmt-free.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cuda::detail {

// count_targets (kernels/cpu/loss.h) on the device; `scratch` is two int64 of
// device memory. Synchronises the compute stream (it returns host values).
std::int64_t launch_count_targets(DType target_dtype, const void* targets, std::int64_t rows, std::int64_t vocab,
                                  std::int64_t ignore_index, std::int64_t* bad_row, std::int64_t* bad_target,
                                  void* scratch);

}  // namespace trident::kernels::cuda::detail
