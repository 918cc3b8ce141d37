// CUDA kernels: Rotary position embedding (positions is a host array, as for the CPU kernel).
//
// Signatures: kernels/rope.h. Semantics: kernels/cpu/rope.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// Consecutive positions (any position offset) need no copy; other positions are copied to the device,
// which waits for the stream. cos/sin are computed on the device in f64, as the CPU does on the host.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"
#include "trident/kernels/rope_frequencies.h"

namespace trident::kernels::cuda {
#include "trident/kernels/rope.h"
}  // namespace trident::kernels::cuda
