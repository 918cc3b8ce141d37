// Launcher of rope.cu for rope.cpp (internal; C++17 and fmt-free).
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"
#include "trident/kernels/rope_frequencies.h"

namespace trident::kernels::cuda::detail {

// Rotates x [B, T, H, D] into out (may alias x). Row t is at position positions[t] when
// `positions` (device memory, T values) is given, else at position_offset + t.
void launch_rope(DType dtype, const void* x, void* out, const std::int64_t* positions, std::int64_t position_offset,
                 std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
                 const RopeFrequencies& freq, bool inverse);

}  // namespace trident::kernels::cuda::detail
