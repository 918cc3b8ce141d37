// The embedding backward's sort workspace and find_invalid_id's result slot
// (embedding.cu) come from the device's caching allocator (scratch.h).
#include "trident/kernels/cuda/embedding.h"

#include "trident/kernels/cuda/embedding_launch.h"
#include "trident/kernels/cuda/scratch.h"

namespace trident::kernels::cuda {

void embedding_backward(DType dtype, DType grad_dtype, DType id_dtype, const void* dout, const void* ids,
                        void* dweight, std::int64_t num_ids, std::int64_t vocab, std::int64_t dim, bool accumulate) {
  const auto workspace = detail::device_scratch(
      vocab > 0 && dim > 0 ? detail::embedding_backward_scratch_bytes(num_ids, vocab) : 0);
  detail::launch_embedding_backward(dtype, grad_dtype, id_dtype, dout, ids, dweight, num_ids, vocab, dim, accumulate,
                                    detail::scratch_data(workspace));
}

std::int64_t find_invalid_id(DType id_dtype, const void* ids, std::int64_t num_ids, std::int64_t vocab,
                             std::int64_t* bad_id) {
  const auto slot = detail::device_scratch(sizeof(std::int64_t));
  return detail::launch_find_invalid_id(id_dtype, ids, num_ids, vocab, bad_id, detail::scratch_data(slot));
}

}  // namespace trident::kernels::cuda
