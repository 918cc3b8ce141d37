// The norm backwards need scratch for their per-chunk weight-gradient partials
// (norm.cu); it comes from the device's caching allocator (scratch.h).
#include "trident/kernels/cuda/norm.h"

#include "trident/kernels/cuda/norm_launch.h"
#include "trident/kernels/cuda/scratch.h"

namespace trident::kernels::cuda {

void layer_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* mean,
                         const void* rstd, void* dx, void* dweight, void* dbias, std::int64_t rows, std::int64_t cols) {
  const auto partials =
      detail::device_scratch(detail::norm_backward_scratch_bytes(dtype, rows, cols, dbias != nullptr ? 2 : 1));
  detail::launch_layer_norm_backward(dtype, dy, x, weight, mean, rstd, dx, dweight, dbias, rows, cols,
                                     detail::scratch_data(partials));
}

void rms_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* rstd, void* dx,
                       void* dweight, std::int64_t rows, std::int64_t cols) {
  const auto partials = detail::device_scratch(detail::norm_backward_scratch_bytes(dtype, rows, cols, 1));
  detail::launch_rms_norm_backward(dtype, dy, x, weight, rstd, dx, dweight, rows, cols,
                                   detail::scratch_data(partials));
}

}  // namespace trident::kernels::cuda
