// Internal to kernels/cuda, for the host-side <family>.cpp files only (it
// includes core's Storage, which nvcc-compiled files cannot parse): device
// scratch for the launchers of the .cu files, from the current device's caching
// allocator.
//
// Dropping the returned pointer right after queuing the kernels that use it is
// safe: the block goes back to the cache, and its next user queues its work on
// the same compute stream, behind those kernels.
#pragma once

#include <cstddef>
#include <memory>

#include "trident/core/storage.h"
#include "trident/kernels/cuda/device.h"

namespace trident::kernels::cuda::detail {

// nbytes of device memory on the current device; null when nbytes is 0.
inline std::shared_ptr<Storage> device_scratch(std::size_t nbytes) {
  return nbytes == 0 ? nullptr : Storage::allocate(nbytes, Device::cuda(current_device()));
}

// The scratch's device address, or null for no scratch.
inline void* scratch_data(const std::shared_ptr<Storage>& scratch) { return scratch ? scratch->data() : nullptr; }

}  // namespace trident::kernels::cuda::detail
