// Storage: a reference-counted block of device memory.
//
// CPU blocks are 64-byte aligned (cache line and AVX-512 width). Storage owns
// its memory unless it wraps external memory (an mmap'd file, a peer's buffer)
// with a release callback. Owned allocations are charged to the memory
// accounting category current at allocation time.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "trident/core/device.h"
#include "trident/core/memory.h"

namespace trident {

inline constexpr std::size_t kStorageAlignment = 64;

class Storage {
 public:
  static std::shared_ptr<Storage> allocate(std::size_t nbytes, Device device);
  // Wraps memory trident does not own; `release` (may be empty) runs when the last reference goes.
  static std::shared_ptr<Storage> wrap(void* data, std::size_t nbytes, Device device, std::function<void()> release);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t nbytes() const noexcept { return nbytes_; }
  Device device() const noexcept { return device_; }
  MemoryCategory category() const noexcept { return category_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  MemoryCategory category_ = MemoryCategory::other;
  bool owned_ = false;
  std::function<void()> release_;
};

// Freed host blocks of 1 MiB or more are kept for reuse (TRIDENT_HOST_CACHE_MB
// bounds them, default 4 GiB). Memory accounting counts live tensors only.
std::size_t host_cache_bytes() noexcept;
void release_host_cache() noexcept;

}  // namespace trident
