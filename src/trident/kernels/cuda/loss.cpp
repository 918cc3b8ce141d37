// count_targets needs two device integers for its count and first bad row
// (loss.cu); they come from the device's caching allocator through core's
// Storage, which nvcc-compiled files cannot include.
#include "trident/kernels/cuda/loss.h"

#include "trident/core/storage.h"
#include "trident/kernels/cuda/device.h"
#include "trident/kernels/cuda/loss_launch.h"

namespace trident::kernels::cuda {

std::int64_t count_targets(DType target_dtype, const void* targets, std::int64_t rows, std::int64_t vocab,
                           std::int64_t ignore_index, std::int64_t* bad_row, std::int64_t* bad_target) {
  const auto scratch = Storage::allocate(2 * sizeof(std::int64_t), Device::cuda(current_device()));
  return detail::launch_count_targets(target_dtype, targets, rows, vocab, ignore_index, bad_row, bad_target,
                                      scratch->data());
}

}  // namespace trident::kernels::cuda
