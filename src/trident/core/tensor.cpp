#include "trident/core/tensor.h"

#include <cstring>

#include "trident/core/backend.h"
#include "trident/core/convert.h"

namespace trident {

Tensor::Tensor(std::shared_ptr<Storage> storage, std::size_t byte_offset, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_(byte_offset), shape_(std::move(shape)), dtype_(dtype) {
  for (auto d : shape_) TRIDENT_CHECK(d >= 0, "negative dimension in shape {}", shape_);
  TRIDENT_CHECK(storage_ == nullptr || offset_ + nbytes() <= storage_->nbytes(),
                "tensor {} at byte offset {} exceeds its storage of {} bytes", describe(), offset_,
                storage_->nbytes());
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  for (auto d : shape) TRIDENT_CHECK(d >= 0, "Tensor::empty: negative dimension in shape {}", shape);
  std::size_t nbytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  return Tensor(Storage::allocate(nbytes, device), 0, std::move(shape), dtype);
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.fill_zero();
  return t;
}

Tensor Tensor::full(Shape shape, double value, DType dtype, Device device) {
  Tensor host = empty(std::move(shape), dtype, Device::cpu());
  fill_value(host, value);
  return host.to(device);
}

Tensor Tensor::scalar(double value, DType dtype) { return full(Shape{}, value, dtype); }

Tensor Tensor::view(Shape shape) const {
  check_defined(*this, "view", "self");
  std::int64_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < shape.rank(); ++i) {
    if (shape[i] == -1) {
      TRIDENT_CHECK(infer < 0, "view: more than one -1 in target shape {}", shape);
      infer = static_cast<int>(i);
    } else {
      TRIDENT_CHECK(shape[i] >= 0, "view: negative dimension in target shape {}", shape);
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    TRIDENT_CHECK(known > 0 && numel() % known == 0, "view: cannot view {} as {}", shape_, shape);
    shape[static_cast<std::size_t>(infer)] = numel() / known;
  }
  TRIDENT_CHECK(shape.numel() == numel(), "view: cannot view {} ({} elements) as {} ({} elements)", shape_, numel(),
                shape, shape.numel());
  return Tensor(storage_, offset_, std::move(shape), dtype_);
}

Tensor Tensor::slice0(std::int64_t begin, std::int64_t end) const {
  check_defined(*this, "slice0", "self");
  TRIDENT_CHECK(rank() >= 1, "slice0: tensor of shape {} has no dim 0", shape_);
  TRIDENT_CHECK(0 <= begin && begin <= end && end <= shape_[0], "slice0: range [{}, {}) out of bounds for shape {}",
                begin, end, shape_);
  Shape s = shape_;
  s[0] = end - begin;
  std::size_t row_bytes = static_cast<std::size_t>(shape_.inner(0)) * dtype_size(dtype_);
  return Tensor(storage_, offset_ + static_cast<std::size_t>(begin) * row_bytes, std::move(s), dtype_);
}

Tensor Tensor::select0(std::int64_t i) const {
  Tensor row = slice0(i, i + 1);
  std::vector<std::int64_t> dims(shape_.begin() + 1, shape_.end());
  return Tensor(row.storage_, row.offset_, Shape(std::move(dims)), dtype_);
}

Tensor Tensor::clone() const {
  check_defined(*this, "clone", "self");
  Tensor out = empty(shape_, dtype_, device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(Device target) const {
  check_defined(*this, "to(device)", "self");
  if (target == device()) return *this;
  Tensor out = empty(shape_, dtype_, target);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(DType target) const {
  check_defined(*this, "to(dtype)", "self");
  if (target == dtype_) return *this;
  Tensor out = empty(shape_, target, device());
  if (!device().is_cpu()) {
    backend_for(device()).convert(raw_data(), dtype_, out.raw_data(), target, numel(), device().index);
    return out;
  }
  convert_elements(raw_data(), dtype_, out.raw_data(), target, numel());
  return out;
}

void Tensor::copy_from(const Tensor& src) const {
  check_defined(*this, "copy_from", "self");
  check_defined(src, "copy_from", "src");
  TRIDENT_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_from: source {} does not match destination {}",
                src.describe(), describe());
  if (nbytes() == 0) return;
  Device d = device().is_cpu() ? src.device() : device();
  backend_for(d).copy(raw_data(), device(), src.raw_data(), src.device(), nbytes());
}

void Tensor::fill_zero() const {
  check_defined(*this, "fill_zero", "self");
  backend_for(device()).fill_zero(raw_data(), nbytes(), device().index);
}

double Tensor::item() const {
  TRIDENT_CHECK(numel() == 1, "item(): tensor {} does not hold exactly one element", describe());
  Tensor host = to(Device::cpu()).to(DType::f64);
  return *host.data<double>();
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return fmt::format("{}{} on {}", dtype_, shape_, device());
}

void check_defined(const Tensor& t, std::string_view op, std::string_view arg) {
  TRIDENT_CHECK(t.defined(), "{}: argument '{}' is an undefined tensor", op, arg);
}
void check_same_shape(const Tensor& a, const Tensor& b, std::string_view op) {
  TRIDENT_CHECK(a.shape() == b.shape(), "{}: shape mismatch {} vs {}", op, a.shape(), b.shape());
}
void check_same_dtype(const Tensor& a, const Tensor& b, std::string_view op) {
  TRIDENT_CHECK(a.dtype() == b.dtype(), "{}: dtype mismatch {} vs {} (shapes {} and {})", op, a.dtype(), b.dtype(),
                a.shape(), b.shape());
}
void check_same_device(const Tensor& a, const Tensor& b, std::string_view op) {
  TRIDENT_CHECK(a.device() == b.device(), "{}: device mismatch {} vs {} (shapes {} and {})", op, a.device(),
                b.device(), a.shape(), b.shape());
}
void check_dtype(const Tensor& t, DType expected, std::string_view op, std::string_view arg) {
  TRIDENT_CHECK(t.dtype() == expected, "{}: argument '{}' has dtype {} (shape {}), expected {}", op, arg, t.dtype(),
                t.shape(), expected);
}
void check_floating(const Tensor& t, std::string_view op, std::string_view arg) {
  TRIDENT_CHECK(is_floating(t.dtype()), "{}: argument '{}' has dtype {} (shape {}), expected a floating type", op, arg,
                t.dtype(), t.shape());
}
void check_rank(const Tensor& t, std::size_t rank, std::string_view op, std::string_view arg) {
  TRIDENT_CHECK(t.rank() == rank, "{}: argument '{}' has shape {}, expected rank {}", op, arg, t.shape(), rank);
}
void check_cpu(const Tensor& t, std::string_view op) {
  TRIDENT_CHECK(t.device().is_cpu(), "{}: tensor {} must be on cpu", op, t.describe());
}

}  // namespace trident
