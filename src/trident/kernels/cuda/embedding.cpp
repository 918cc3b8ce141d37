// The embedding backward's sort workspace and find_invalid_id's result slot
// (embedding.cu) come from the device's caching allocator through core's
// Storage, which nvcc-compiled files cannot include. Freeing the workspace
// right after the launches is safe: the next user of the block queues its work
// on the same compute stream, behind these kernels.
#include "trident/kernels/cuda/embedding.h"

#include <memory>

#include "trident/core/storage.h"
#include "trident/kernels/cuda/device.h"
#include "trident/kernels/cuda/embedding_launch.h"

namespace trident::kernels::cuda {

namespace {
std::shared_ptr<Storage> scratch(std::size_t nbytes) {
  return nbytes == 0 ? nullptr : Storage::allocate(nbytes, Device::cuda(current_device()));
}
}  // namespace

void embedding_backward(DType dtype, DType id_dtype, const void* dout, const void* ids, void* dweight,
                        std::int64_t num_ids, std::int64_t vocab, std::int64_t dim) {
  const auto workspace = scratch(vocab > 0 && dim > 0 ? detail::embedding_backward_scratch_bytes(num_ids, vocab) : 0);
  detail::launch_embedding_backward(dtype, id_dtype, dout, ids, dweight, num_ids, vocab, dim,
                                    workspace ? workspace->data() : nullptr);
}

std::int64_t find_invalid_id(DType id_dtype, const void* ids, std::int64_t num_ids, std::int64_t vocab,
                             std::int64_t* bad_id) {
  const auto slot = scratch(sizeof(std::int64_t));
  return detail::launch_find_invalid_id(id_dtype, ids, num_ids, vocab, bad_id, slot->data());
}

}  // namespace trident::kernels::cuda
