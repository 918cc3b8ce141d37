// Shape kernels: permute walks the output in order with an odometer over the
// input strides (the last two axes handled as a tight inner loop); block
// copies are memcpy per outer row.
#include "trident/kernels/cpu/shape.h"

#include <cstring>

#include "trident/core/dtype.h"
#include "trident/core/parallel.h"

namespace trident::kernels::cpu {

void permute(std::size_t elem_size, const void* x, void* out, const Shape& in_shape,
             const std::vector<std::size_t>& perm) {
  const std::size_t r = in_shape.rank();
  const std::int64_t n = in_shape.numel();
  if (n == 0) return;
  if (r == 0) {
    std::memcpy(out, x, elem_size);
    return;
  }
  std::vector<std::int64_t> in_strides(r, 1);
  for (std::size_t d = r; d-- > 1;) in_strides[d - 1] = in_strides[d] * in_shape[d];
  std::vector<std::int64_t> out_dims(r), strides(r);  // strides: input stride of each output axis
  for (std::size_t i = 0; i < r; ++i) {
    out_dims[i] = in_shape[perm[i]];
    strides[i] = in_strides[perm[i]];
  }
  const std::int64_t last = r ? out_dims[r - 1] : 1;
  const std::int64_t last_stride = r ? strides[r - 1] : 1;
  const std::int64_t rows = n / last;
  const auto* src = static_cast<const char*>(x);
  auto* dst = static_cast<char*>(out);
  parallel_for(0, rows, 16, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t row = lo; row < hi; ++row) {
      // Input offset of this output row's first element.
      std::int64_t rem = row, off = 0;
      for (std::size_t d = r - 1; d-- > 0;) {
        off += (rem % out_dims[d]) * strides[d];
        rem /= out_dims[d];
      }
      char* o = dst + static_cast<std::size_t>(row * last) * elem_size;
      if (last_stride == 1) {
        std::memcpy(o, src + static_cast<std::size_t>(off) * elem_size, static_cast<std::size_t>(last) * elem_size);
      } else {
        for (std::int64_t j = 0; j < last; ++j)
          std::memcpy(o + static_cast<std::size_t>(j) * elem_size,
                      src + static_cast<std::size_t>(off + j * last_stride) * elem_size, elem_size);
      }
    }
  });
}

void copy_dim_block(std::size_t elem_size, const void* src, std::int64_t src_dim, std::int64_t src_start, void* dst,
                    std::int64_t dst_dim, std::int64_t dst_start, std::int64_t outer, std::int64_t inner,
                    std::int64_t len) {
  const std::size_t chunk = static_cast<std::size_t>(len * inner) * elem_size;
  if (chunk == 0) return;
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  parallel_for(0, outer, std::max<std::int64_t>(1, (1 << 16) / static_cast<std::int64_t>(chunk)),
               [&](std::int64_t lo, std::int64_t hi) {
                 for (std::int64_t o = lo; o < hi; ++o) {
                   std::memcpy(d + static_cast<std::size_t>((o * dst_dim + dst_start) * inner) * elem_size,
                               s + static_cast<std::size_t>((o * src_dim + src_start) * inner) * elem_size, chunk);
                 }
               });
}

}  // namespace trident::kernels::cpu
