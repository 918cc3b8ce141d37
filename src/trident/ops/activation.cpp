#include "trident/ops/activation.h"

#include "trident/kernels/cpu/activation.h"
#include "trident/ops/dispatch.h"
#include "trident/ops/reduce.h"

namespace trident::ops {

namespace {

using kernels::cpu::Activation;

void check_input(const Tensor& x, std::string_view op, std::string_view name) {
  check_defined(x, op, name);
  check_floating(x, op, name);
}

// A second tensor that must match the first in shape, dtype and device.
void check_like(const Tensor& t, const Tensor& like, std::string_view op, std::string_view name,
                std::string_view like_name) {
  check_defined(t, op, name);
  TRIDENT_CHECK(t.shape() == like.shape(), "{}: {} of shape {} does not match {} of shape {}", op, name, t.shape(),
                like_name, like.shape());
  TRIDENT_CHECK(t.dtype() == like.dtype(), "{}: {} has dtype {} (shape {}) but {} has dtype {} (shape {})", op, name,
                t.dtype(), t.shape(), like_name, like.dtype(), like.shape());
  check_same_device(t, like, op);
}

Tensor unary(Activation act, std::string_view op, const Tensor& x) {
  check_input(x, op, "x");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  TRIDENT_KERNEL(x.device(), activation_forward, act, x.dtype(), x.raw_data(), y.raw_data(), x.numel());
  return y;
}

Tensor unary_backward(Activation act, std::string_view op, const Tensor& dy, const Tensor& x) {
  check_input(x, op, "x");
  check_like(dy, x, op, "dy", "x");
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  TRIDENT_KERNEL(x.device(), activation_backward, act, x.dtype(), dy.raw_data(), x.raw_data(), dx.raw_data(),
                 x.numel());
  return dx;
}

// x [..., C] with bias [C]; returns C.
std::int64_t check_bias(const Tensor& x, const Tensor& bias, std::string_view op) {
  check_defined(bias, op, "bias");
  TRIDENT_CHECK(x.rank() >= 1 && bias.rank() == 1 && bias.size(0) == x.size(-1),
                "{}: bias of shape {} does not match the last dimension of x {}", op, bias.shape(), x.shape());
  TRIDENT_CHECK(bias.dtype() == x.dtype(), "{}: bias has dtype {} (shape {}) but x has dtype {} (shape {})", op,
                bias.dtype(), bias.shape(), x.dtype(), x.shape());
  check_same_device(x, bias, op);
  return x.size(-1);
}

}  // namespace

Tensor gelu_tanh(const Tensor& x) { return unary(Activation::gelu_tanh, "gelu_tanh", x); }
Tensor gelu_tanh_backward(const Tensor& dy, const Tensor& x) {
  return unary_backward(Activation::gelu_tanh, "gelu_tanh_backward", dy, x);
}
Tensor gelu(const Tensor& x) { return unary(Activation::gelu, "gelu", x); }
Tensor gelu_backward(const Tensor& dy, const Tensor& x) {
  return unary_backward(Activation::gelu, "gelu_backward", dy, x);
}
Tensor silu(const Tensor& x) { return unary(Activation::silu, "silu", x); }
Tensor silu_backward(const Tensor& dy, const Tensor& x) {
  return unary_backward(Activation::silu, "silu_backward", dy, x);
}

Tensor tanh(const Tensor& x) {
  constexpr std::string_view op = "tanh";
  check_input(x, op, "x");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  TRIDENT_KERNEL(x.device(), tanh_forward, x.dtype(), x.raw_data(), y.raw_data(), x.numel());
  return y;
}

Tensor tanh_backward(const Tensor& dy, const Tensor& y) {
  constexpr std::string_view op = "tanh_backward";
  check_input(y, op, "y");
  check_like(dy, y, op, "dy", "y");
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
  TRIDENT_KERNEL(y.device(), tanh_backward, y.dtype(), dy.raw_data(), y.raw_data(), dx.raw_data(), y.numel());
  return dx;
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  constexpr std::string_view op = "swiglu";
  check_input(gate, op, "gate");
  check_like(up, gate, op, "up", "gate");
  Tensor out = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  TRIDENT_KERNEL(gate.device(), swiglu_forward, gate.dtype(), gate.raw_data(), up.raw_data(), out.raw_data(),
                 gate.numel());
  return out;
}

SwigluGrads swiglu_backward(const Tensor& dy, const Tensor& gate, const Tensor& up) {
  constexpr std::string_view op = "swiglu_backward";
  check_input(gate, op, "gate");
  check_like(up, gate, op, "up", "gate");
  check_like(dy, gate, op, "dy", "gate");
  SwigluGrads g{Tensor::empty(gate.shape(), gate.dtype(), gate.device()),
                Tensor::empty(gate.shape(), gate.dtype(), gate.device())};
  TRIDENT_KERNEL(gate.device(), swiglu_backward, gate.dtype(), dy.raw_data(), gate.raw_data(), up.raw_data(),
                 g.dgate.raw_data(), g.dup.raw_data(), gate.numel());
  return g;
}

Tensor bias_gelu_tanh(const Tensor& x, const Tensor& bias) {
  constexpr std::string_view op = "bias_gelu_tanh";
  check_input(x, op, "x");
  const std::int64_t cols = check_bias(x, bias, op);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  TRIDENT_KERNEL(x.device(), bias_gelu_tanh_forward, x.dtype(), x.raw_data(), bias.raw_data(), y.raw_data(),
                 cols ? x.numel() / cols : 0, cols);
  return y;
}

BiasGeluGrads bias_gelu_tanh_backward(const Tensor& dy, const Tensor& x, const Tensor& bias) {
  constexpr std::string_view op = "bias_gelu_tanh_backward";
  check_input(x, op, "x");
  const std::int64_t cols = check_bias(x, bias, op);
  check_like(dy, x, op, "dy", "x");
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  TRIDENT_KERNEL(x.device(), bias_gelu_tanh_backward, x.dtype(), dy.raw_data(), x.raw_data(), bias.raw_data(),
                 dx.raw_data(), cols ? x.numel() / cols : 0, cols);
  Tensor dbias = sum_to_last_dim(dx);
  return {std::move(dx), std::move(dbias)};
}

}  // namespace trident::ops
