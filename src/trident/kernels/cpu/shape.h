// CPU data-movement kernels for the shape ops. Byte-generic: they move
// elements of `elem_size` bytes and never look at values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "trident/core/shape.h"

namespace trident::kernels::cpu {

// out = x permuted: out.shape[i] = in_shape[perm[i]].
void permute(std::size_t elem_size, const void* x, void* out, const Shape& in_shape,
             const std::vector<std::size_t>& perm);

// Views src as [outer, src_dim, inner] and dst as [outer, dst_dim, inner] and
// copies the block [:, src_start : src_start+len, :] to [:, dst_start : dst_start+len, :].
void copy_dim_block(std::size_t elem_size, const void* src, std::int64_t src_dim, std::int64_t src_start, void* dst,
                    std::int64_t dst_dim, std::int64_t dst_start, std::int64_t outer, std::int64_t inner,
                    std::int64_t len);

}  // namespace trident::kernels::cpu
