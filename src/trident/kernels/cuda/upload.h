// Host → GPU uploads of small per-step tensors (token ids, labels) through
// page-locked staging buffers, so the copy is a true asynchronous DMA on the
// compute stream instead of a staged, host-blocking pageable copy.
#pragma once

#include <cstddef>
#include <vector>

#include "trident/core/tensor.h"
#include "trident/kernels/cuda/device.h"

namespace trident::kernels::cuda {

// A ring of pinned buffers: upload() copies a host tensor into the next one,
// queues its copy to a new device tensor on the compute stream and records an
// event; a buffer is reused only after its event has completed, so the host
// never overwrites bytes the DMA has not read yet. Kernels queued after
// upload() see the data (same stream); the host does not wait.
class PinnedUploader {
 public:
  explicit PinnedUploader(int device, int buffers = 4);

  Tensor upload(const Tensor& host);

 private:
  struct Slot {
    PinnedBuffer buffer;
    Event done;
    bool used;
  };
  int device_;
  std::vector<Slot> slots_;
  std::size_t next_ = 0;
};

}  // namespace trident::kernels::cuda
