// CUDA kernels: Permute and the dim-block copies behind split, concat and slice.
//
// Same signatures and semantics as kernels/cpu/shape.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
// permute supports up to 16 axes after merging the ones that stay adjacent (it fails clearly beyond).
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/shape.h"

namespace trident::kernels::cuda {

void permute(std::size_t elem_size, const void* x, void* out, const Shape& in_shape,
             const std::vector<std::size_t>& perm);

void copy_dim_block(std::size_t elem_size, const void* src, std::int64_t src_dim, std::int64_t src_start, void* dst,
                    std::int64_t dst_dim, std::int64_t dst_start, std::int64_t outer, std::int64_t inner,
                    std::int64_t len);

}  // namespace trident::kernels::cuda
