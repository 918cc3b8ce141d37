// Host side of the CUDA shape kernels: permute and copy_dim_block become a
// row copy or a tiled transpose (shape_launch.h). permute first simplifies the
// permutation: size-1 axes are dropped and output axes that stay adjacent and
// in order in the input are merged, so a [B, T, H, D] -> [B, H, T, D] is a
// copy of D-element rows and a pure reshape is one memcpy.
#include "trident/kernels/cuda/shape.h"

#include <cuda_runtime.h>

#include "trident/core/error.h"
#include "trident/kernels/cuda/device.h"
#include "trident/kernels/cuda/shape_launch.h"

namespace trident::kernels::cuda {

namespace {

void copy_bytes(void* dst, const void* src, std::size_t nbytes) {
  if (nbytes == 0) return;
  const auto stream = static_cast<cudaStream_t>(compute_stream(current_device()).native());
  check_status(static_cast<int>(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream)),
               "cudaMemcpyAsync (shape copy)");
}

}  // namespace

void permute(std::size_t elem_size, const void* x, void* out, const Shape& in_shape,
             const std::vector<std::size_t>& perm) {
  const std::size_t r = in_shape.rank();
  const std::int64_t n = in_shape.numel();
  if (n == 0) return;
  std::vector<std::int64_t> in_strides(r, 1);
  for (std::size_t d = r; d-- > 1;) in_strides[d - 1] = in_strides[d] * in_shape[d];
  // Output axes (outermost first) with their input strides, size-1 axes dropped, mergeable neighbours merged.
  std::vector<std::int64_t> dims, strides;
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t size = in_shape[perm[i]], stride = in_strides[perm[i]];
    if (size == 1) continue;
    if (!dims.empty() && strides.back() == stride * size) {
      dims.back() *= size;
      strides.back() = stride;
    } else {
      dims.push_back(size);
      strides.push_back(stride);
    }
  }
  if (dims.size() <= 1) {  // the permutation keeps the element order
    copy_bytes(out, x, static_cast<std::size_t>(n) * elem_size);
    return;
  }
  const std::size_t m = dims.size();
  TRIDENT_CHECK(m <= static_cast<std::size_t>(detail::kMaxPlanDims),
                "CUDA permute: {} axes that do not merge (shape {}); at most {} are supported", m, in_shape,
                detail::kMaxPlanDims);
  if (strides[m - 1] == 1) {
    // The last output axis is the input's innermost: copy rows of dims[m - 1] elements.
    detail::RowCopyPlan plan;
    plan.row_len = dims[m - 1];
    plan.rows = n / plan.row_len;
    plan.rank = static_cast<int>(m - 1);
    for (std::size_t k = 0; k + 1 < m; ++k) {
      plan.dims[k] = dims[k];
      plan.src_strides[k] = strides[k];
    }
    plan.dst_pitch = plan.row_len;
    detail::launch_row_copy(elem_size, x, out, plan);
    return;
  }
  // Otherwise some other output axis a is the input's innermost (stride 1): transpose tiles of (a, last).
  std::size_t a = 0;
  while (strides[a] != 1) ++a;  // exists: the input's innermost non-trivial axis has stride 1
  std::vector<std::int64_t> out_strides(m, 1);
  for (std::size_t d = m; d-- > 1;) out_strides[d - 1] = out_strides[d] * dims[d];
  detail::TransposePlan plan;
  plan.m = dims[a];
  plan.n = dims[m - 1];
  plan.in_stride_n = strides[m - 1];
  plan.out_stride_m = out_strides[a];
  for (std::size_t k = 0; k + 1 < m; ++k) {
    if (k == a) continue;
    plan.batch_dims[plan.batch_rank] = dims[k];
    plan.batch_in_strides[plan.batch_rank] = strides[k];
    plan.batch_out_strides[plan.batch_rank] = out_strides[k];
    plan.batch_count *= dims[k];
    ++plan.batch_rank;
  }
  detail::launch_transpose(elem_size, x, out, plan);
}

void copy_dim_block(std::size_t elem_size, const void* src, std::int64_t src_dim, std::int64_t src_start, void* dst,
                    std::int64_t dst_dim, std::int64_t dst_start, std::int64_t outer, std::int64_t inner,
                    std::int64_t len) {
  if (outer <= 0 || inner <= 0 || len <= 0) return;
  const std::int64_t row = len * inner;
  if (outer == 1 || (src_dim == len && dst_dim == len)) {  // one contiguous block
    copy_bytes(static_cast<char*>(dst) + static_cast<std::size_t>(dst_start * inner) * elem_size,
               static_cast<const char*>(src) + static_cast<std::size_t>(src_start * inner) * elem_size,
               static_cast<std::size_t>(outer * row) * elem_size);
    return;
  }
  detail::RowCopyPlan plan;
  plan.rows = outer;
  plan.row_len = row;
  plan.rank = 1;
  plan.dims[0] = outer;
  plan.src_strides[0] = src_dim * inner;
  plan.src_base = src_start * inner;
  plan.dst_base = dst_start * inner;
  plan.dst_pitch = dst_dim * inner;
  detail::launch_row_copy(elem_size, src, dst, plan);
}

}  // namespace trident::kernels::cuda
