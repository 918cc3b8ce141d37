// Tensor: a contiguous, row-major, typed view of a Storage.
//
// A Tensor is a cheap handle (shared storage + byte offset + shape + dtype).
// Copies of the handle share memory; clone() copies the data. Every tensor is
// contiguous; the only views are reshapes and ranges along dim 0 (slice0,
// select0), which keeps every kernel simple and every buffer addressable as
// one span. An undefined Tensor (default-constructed) has no storage.
//
// Ownership: the storage lives as long as any handle or view onto it (a
// shared_ptr). Writes through one handle are seen by every other; nothing is
// synchronised, so two threads must not write the same tensor at once.
// Errors (a shape, dtype or device that does not fit) throw trident::Error
// with a one-line message naming the operation and the shapes. Tensors are
// local to a rank: nothing here communicates (dist/communicator.h does).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "trident/core/device.h"
#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/shape.h"
#include "trident/core/storage.h"

namespace trident {

class Tensor {
 public:
  Tensor() = default;

  // --- new tensors, each with storage of its own ---
  // Uninitialised memory of `shape` (e.g. {batch, seq}); Shape{} is a scalar of one element.
  static Tensor empty(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  // Every element 0 (or `value`, rounded to `dtype`).
  static Tensor zeros(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(Shape shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
  // A CPU tensor of shape [] holding `value`.
  static Tensor scalar(double value, DType dtype = DType::f32);
  // Copies `values` into a new CPU tensor of shape `shape` (numel must match).
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape);
  // A tensor over existing storage (used by views and by wrappers of external memory).
  Tensor(std::shared_ptr<Storage> storage, std::size_t byte_offset, Shape shape, DType dtype);

  bool defined() const noexcept { return storage_ != nullptr; }
  const Shape& shape() const noexcept { return shape_; }
  std::size_t rank() const noexcept { return shape_.rank(); }
  std::int64_t size(std::int64_t dim) const { return shape_.dim(dim); }
  std::int64_t numel() const noexcept { return shape_.numel(); }
  DType dtype() const noexcept { return dtype_; }
  Device device() const noexcept { return storage_ ? storage_->device() : Device::cpu(); }
  std::size_t nbytes() const noexcept { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  const std::shared_ptr<Storage>& storage() const noexcept { return storage_; }
  std::size_t byte_offset() const noexcept { return offset_; }

  // The first element's address (device memory for a GPU tensor); the tensor must be defined. The pointer
  // is valid while any handle to the storage lives.
  void* raw_data() const noexcept { return static_cast<char*>(storage_->data()) + offset_; }
  // Typed pointer; throws when T does not match the dtype (e.g. data<float>() needs f32).
  template <typename T>
  T* data() const {
    TRIDENT_CHECK(defined(), "data<{}>() on an undefined tensor", dtype_name(dtype_of_v<T>));
    TRIDENT_CHECK(dtype_of_v<T> == dtype_, "data<{}>() on a tensor of dtype {} and shape {}", dtype_name(dtype_of_v<T>),
                  dtype_, shape_);
    return static_cast<T*>(raw_data());
  }
  // The numel() elements as one span, with the checks of data<T>() (device memory for a GPU tensor).
  template <typename T>
  std::span<T> span() const {
    return {data<T>(), static_cast<std::size_t>(numel())};
  }

  // --- views (share storage) ---
  // Same data, new shape (numel must match; one dimension may be -1).
  Tensor view(Shape shape) const;
  Tensor flatten() const { return view(Shape{numel()}); }
  // Rows [begin, end) along dim 0.
  Tensor slice0(std::int64_t begin, std::int64_t end) const;
  // Row i along dim 0, with that dimension removed.
  Tensor select0(std::int64_t i) const;

  // --- copies (new storage, unless noted) ---
  Tensor clone() const;            // same shape, dtype and device
  Tensor to(Device device) const;  // returns *this when already there
  Tensor to(DType dtype) const;    // returns *this when already that dtype (on a GPU: floating dtypes)
  // Data writes through a const handle: a Tensor is a handle, like a shared_ptr.
  void copy_from(const Tensor& src) const;  // same shape/dtype, any devices
  void fill_zero() const;

  // The elements in row-major order, copied to the host and converted to T (e.g. to_vector<float>() of a
  // bf16 GPU tensor).
  template <typename T>
  std::vector<T> to_vector() const;
  // The single element as double (numel must be 1; any device and dtype), e.g. a loss value.
  double item() const;

  // The same storage, offset, shape and dtype: one tensor seen through two handles.
  bool is_same(const Tensor& other) const noexcept {
    return storage_ == other.storage_ && offset_ == other.offset_ && shape_ == other.shape_ && dtype_ == other.dtype_;
  }
  std::string describe() const;  // "f32[2, 3] on cpu"

 private:
  std::shared_ptr<Storage> storage_;
  std::size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

// Shared argument checks for ops; each throws trident::Error naming `op` and the shapes.
void check_defined(const Tensor& t, std::string_view op, std::string_view arg);
void check_same_shape(const Tensor& a, const Tensor& b, std::string_view op);
void check_same_dtype(const Tensor& a, const Tensor& b, std::string_view op);
void check_same_device(const Tensor& a, const Tensor& b, std::string_view op);
void check_dtype(const Tensor& t, DType expected, std::string_view op, std::string_view arg);
void check_floating(const Tensor& t, std::string_view op, std::string_view arg);
void check_rank(const Tensor& t, std::size_t rank, std::string_view op, std::string_view arg);
void check_cpu(const Tensor& t, std::string_view op);

// --- template definitions ---
template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape) {
  TRIDENT_CHECK(static_cast<std::int64_t>(values.size()) == shape.numel(),
                "Tensor::from_vector: {} values do not fill shape {}", values.size(), shape);
  Tensor t = empty(std::move(shape), dtype_of_v<T>);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = to(Device::cpu());
  if (host.dtype() != dtype_of_v<T>) host = host.to(dtype_of_v<T>);
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}

}  // namespace trident
