#include "trident/ops/softmax.h"

#include "trident/kernels/cpu/softmax.h"
#include "trident/ops/dispatch.h"

namespace trident::ops {

namespace {
std::int64_t rows_of(const Tensor& x) { return x.size(-1) ? x.numel() / x.size(-1) : 0; }
}  // namespace

Tensor softmax(const Tensor& x) {
  check_defined(x, "softmax", "x");
  check_floating(x, "softmax", "x");
  TRIDENT_CHECK(x.rank() >= 1, "softmax: x must have at least one dimension, got shape {}", x.shape());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  TRIDENT_KERNEL(x.device(), softmax_forward, x.dtype(), x.raw_data(), y.raw_data(), rows_of(x), x.size(-1));
  return y;
}

Tensor softmax_backward(const Tensor& y, const Tensor& dy) {
  check_defined(y, "softmax_backward", "y");
  check_defined(dy, "softmax_backward", "dy");
  check_floating(y, "softmax_backward", "y");
  check_same_shape(y, dy, "softmax_backward");
  check_same_dtype(y, dy, "softmax_backward");
  check_same_device(y, dy, "softmax_backward");
  TRIDENT_CHECK(y.rank() >= 1, "softmax_backward: y must have at least one dimension, got shape {}", y.shape());
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
  TRIDENT_KERNEL(y.device(), softmax_backward, y.dtype(), y.raw_data(), dy.raw_data(), dx.raw_data(), rows_of(y),
                 y.size(-1));
  return dx;
}

}  // namespace trident::ops
