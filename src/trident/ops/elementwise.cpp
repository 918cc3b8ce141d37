#include "trident/ops/elementwise.h"

#include "trident/kernels/cpu/elementwise.h"
#include "trident/ops/dispatch.h"

namespace trident::ops {

namespace {
Tensor binary(kernels::cpu::BinaryOp op, std::string_view name, const Tensor& a, const Tensor& b) {
  check_defined(a, name, "a");
  check_defined(b, name, "b");
  check_same_shape(a, b, name);
  check_same_dtype(a, b, name);
  check_same_device(a, b, name);
  check_floating(a, name, "a");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  TRIDENT_KERNEL(a.device(), binary, op, a.dtype(), a.raw_data(), b.raw_data(), out.raw_data(), a.numel());
  return out;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(kernels::cpu::BinaryOp::add, "add", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(kernels::cpu::BinaryOp::sub, "sub", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(kernels::cpu::BinaryOp::mul, "mul", a, b); }

Tensor scale(const Tensor& a, double s) {
  check_defined(a, "scale", "a");
  check_floating(a, "scale", "a");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  TRIDENT_KERNEL(a.device(), scale, a.dtype(), a.raw_data(), s, out.raw_data(), a.numel());
  return out;
}

Tensor bias_add(const Tensor& x, const Tensor& bias) {
  check_defined(x, "bias_add", "x");
  check_defined(bias, "bias_add", "bias");
  TRIDENT_CHECK(x.rank() >= 1 && bias.rank() == 1 && bias.size(0) == x.size(-1),
                "bias_add: bias of shape {} does not match the last dimension of x {}", bias.shape(), x.shape());
  check_same_dtype(x, bias, "bias_add");
  check_same_device(x, bias, "bias_add");
  check_floating(x, "bias_add", "x");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const std::int64_t cols = x.size(-1);
  TRIDENT_KERNEL(x.device(), bias_add, x.dtype(), x.raw_data(), bias.raw_data(), out.raw_data(),
                 cols ? x.numel() / cols : 0, cols);
  return out;
}

Tensor cast(const Tensor& x, DType dtype) {
  check_defined(x, "cast", "x");
  // Tensor::to converts on the tensor's device (on a GPU through the backend's cast kernel).
  return x.to(dtype);
}

void add_(Tensor& dst, const Tensor& src, double alpha) {
  check_defined(dst, "add_", "dst");
  check_defined(src, "add_", "src");
  check_same_shape(dst, src, "add_");
  check_same_dtype(dst, src, "add_");
  check_same_device(dst, src, "add_");
  check_floating(dst, "add_", "dst");
  TRIDENT_KERNEL(dst.device(), axpy, dst.dtype(), alpha, src.raw_data(), dst.raw_data(), dst.numel());
}

void scale_(Tensor& dst, double s) {
  check_defined(dst, "scale_", "dst");
  check_floating(dst, "scale_", "dst");
  TRIDENT_KERNEL(dst.device(), scale, dst.dtype(), dst.raw_data(), s, dst.raw_data(), dst.numel());
}

}  // namespace trident::ops
