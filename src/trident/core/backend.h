// DeviceBackend: the narrow interface a device implements for core.
//
// core knows how to allocate, copy and zero memory on a device only through
// this table. The CPU backend is built in; the CUDA backend (kernels/cuda)
// registers itself when it is compiled in. Ops dispatch to their kernels
// separately (ops/), so this stays small: memory and synchronisation only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "trident/core/device.h"
#include "trident/core/dtype_enum.h"

namespace trident {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual void* allocate(std::size_t nbytes, int index) = 0;
  virtual void deallocate(void* ptr, std::size_t nbytes, int index) noexcept = 0;
  // Copies between this backend's device and the host or itself (either side may be cpu).
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, std::size_t nbytes) = 0;
  virtual void fill_zero(void* ptr, std::size_t nbytes, int index) = 0;
  // Converts n elements between dtypes on the device (Tensor::to(dtype) for its
  // tensors); the rounding is core's convert_elements'. Devices without it refuse.
  virtual void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n, int index);
  virtual void synchronize(int index) = 0;
  virtual int device_count() const = 0;
};

// Registers the backend for a device type (called once at start-up by that backend).
void register_backend(DeviceType type, DeviceBackend* backend) noexcept;
// The backend for `device`; throws a clear error when that device type was not built or has no such index.
DeviceBackend& backend_for(Device device);

}  // namespace trident
