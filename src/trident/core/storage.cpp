#include "trident/core/storage.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "trident/core/backend.h"
#include "trident/core/error.h"

namespace trident {
namespace {

class CpuBackend final : public DeviceBackend {
 public:
  void* allocate(std::size_t nbytes, int) override {
    std::size_t rounded = (nbytes + kStorageAlignment - 1) / kStorageAlignment * kStorageAlignment;
    void* p = std::aligned_alloc(kStorageAlignment, rounded == 0 ? kStorageAlignment : rounded);
    TRIDENT_CHECK(p != nullptr, "out of host memory allocating {} bytes", nbytes);
    return p;
  }
  void deallocate(void* ptr, std::size_t, int) noexcept override { std::free(ptr); }
  void copy(void* dst, Device, const void* src, Device, std::size_t nbytes) override {
    if (nbytes) std::memcpy(dst, src, nbytes);
  }
  void fill_zero(void* ptr, std::size_t nbytes, int) override {
    if (nbytes) std::memset(ptr, 0, nbytes);
  }
  void synchronize(int) override {}
  int device_count() const override { return 1; }
};

CpuBackend g_cpu_backend;
DeviceBackend* g_backends[2] = {&g_cpu_backend, nullptr};

}  // namespace

void register_backend(DeviceType type, DeviceBackend* backend) noexcept {
  g_backends[static_cast<int>(type)] = backend;
}

bool backend_available(DeviceType type) noexcept { return g_backends[static_cast<int>(type)] != nullptr; }

DeviceBackend& backend_for(Device device) {
  DeviceBackend* b = g_backends[static_cast<int>(device.type)];
  TRIDENT_CHECK(b != nullptr, "device {} is not available: this build of trident has no CUDA support", device);
  TRIDENT_CHECK(device.index >= 0 && device.index < b->device_count(), "device {} does not exist ({} device(s) found)",
                device, b->device_count());
  return *b;
}

std::shared_ptr<Storage> Storage::allocate(std::size_t nbytes, Device device) {
  auto s = std::shared_ptr<Storage>(new Storage());
  s->data_ = backend_for(device).allocate(nbytes, device.index);
  s->nbytes_ = nbytes;
  s->device_ = device;
  s->owned_ = true;
  s->category_ = current_memory_category();
  detail::record_allocation(device, s->category_, static_cast<std::int64_t>(nbytes));
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, std::size_t nbytes, Device device, std::function<void()> release) {
  auto s = std::shared_ptr<Storage>(new Storage());
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->device_ = device;
  s->owned_ = false;
  s->release_ = std::move(release);
  return s;
}

Storage::~Storage() {
  if (owned_) {
    backend_for(device_).deallocate(data_, nbytes_, device_.index);
    detail::record_free(device_, category_, static_cast<std::int64_t>(nbytes_));
  } else if (release_) {
    release_();
  }
}

}  // namespace trident
