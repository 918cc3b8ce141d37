// count_targets needs two device integers for its count and first bad row
// (loss.cu); they come from the device's caching allocator (scratch.h).
#include "trident/kernels/cuda/loss.h"

#include "trident/kernels/cuda/loss_launch.h"
#include "trident/kernels/cuda/scratch.h"

namespace trident::kernels::cuda {

std::int64_t count_targets(DType target_dtype, const void* targets, std::int64_t rows, std::int64_t vocab,
                           std::int64_t ignore_index, std::int64_t* bad_row, std::int64_t* bad_target) {
  const auto scratch = detail::device_scratch(2 * sizeof(std::int64_t));
  return detail::launch_count_targets(target_dtype, targets, rows, vocab, ignore_index, bad_row, bad_target,
                                      detail::scratch_data(scratch));
}

}  // namespace trident::kernels::cuda
