#include "trident/kernels/cuda/upload.h"

#include <cstring>

#include "trident/core/error.h"

namespace trident::kernels::cuda {

PinnedUploader::PinnedUploader(int device, int buffers) : device_(device) {
  TRIDENT_CHECK(buffers >= 1, "PinnedUploader: needs at least one buffer, got {}", buffers);
  slots_.reserve(static_cast<std::size_t>(buffers));
  for (int i = 0; i < buffers; ++i) slots_.push_back(Slot{PinnedBuffer(0), Event(device), false});
}

Tensor PinnedUploader::upload(const Tensor& host) {
  TRIDENT_CHECK(host.defined() && host.device().is_cpu(), "PinnedUploader: expected a host tensor, got {}",
                host.defined() ? host.describe() : std::string("undefined"));
  Slot& slot = slots_[next_];
  next_ = (next_ + 1) % slots_.size();
  if (slot.used) slot.done.synchronize();  // the DMA from this buffer has finished
  if (slot.buffer.size() < host.nbytes()) slot.buffer = PinnedBuffer(host.nbytes());
  std::memcpy(slot.buffer.data(), host.raw_data(), host.nbytes());
  Tensor out = Tensor::empty(host.shape(), host.dtype(), Device::cuda(device_));
  const Stream& stream = compute_stream(device_);
  copy_to_device_async(out.raw_data(), slot.buffer.data(), host.nbytes(), stream);
  slot.done.record(stream);
  slot.used = true;
  return out;
}

}  // namespace trident::kernels::cuda
