// The norm backwards need scratch for their per-chunk weight-gradient partials
// (norm.cu); it comes from the device's caching allocator through core's
// Storage, which nvcc-compiled files cannot include. Freeing it right after the
// launches is safe: the next user of the block queues its work on the same
// compute stream, behind these kernels.
#include "trident/kernels/cuda/norm.h"

#include <memory>

#include "trident/core/storage.h"
#include "trident/kernels/cuda/device.h"
#include "trident/kernels/cuda/norm_launch.h"

namespace trident::kernels::cuda {

namespace {
std::shared_ptr<Storage> scratch(std::size_t nbytes) {
  return nbytes == 0 ? nullptr : Storage::allocate(nbytes, Device::cuda(current_device()));
}
}  // namespace

void layer_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* mean,
                         const void* rstd, void* dx, void* dweight, void* dbias, std::int64_t rows, std::int64_t cols) {
  const auto partials = scratch(detail::norm_backward_scratch_bytes(dtype, rows, cols, dbias != nullptr ? 2 : 1));
  detail::launch_layer_norm_backward(dtype, dy, x, weight, mean, rstd, dx, dweight, dbias, rows, cols,
                                     partials ? partials->data() : nullptr);
}

void rms_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* rstd, void* dx,
                       void* dweight, std::int64_t rows, std::int64_t cols) {
  const auto partials = scratch(detail::norm_backward_scratch_bytes(dtype, rows, cols, 1));
  detail::launch_rms_norm_backward(dtype, dy, x, weight, rstd, dx, dweight, rows, cols,
                                   partials ? partials->data() : nullptr);
}

}  // namespace trident::kernels::cuda
