#include "trident/ops/reduce.h"

#include "trident/kernels/cpu/reduce.h"
#include "trident/ops/dispatch.h"

namespace trident::ops {

Tensor sum(const Tensor& x) {
  check_defined(x, "sum", "x");
  check_floating(x, "sum", "x");
  const double s = TRIDENT_KERNEL(x.device(), sum_all, x.dtype(), x.raw_data(), x.numel());
  return Tensor::full(Shape{}, s, x.dtype(), x.device());
}

Tensor mean(const Tensor& x) {
  check_defined(x, "mean", "x");
  check_floating(x, "mean", "x");
  TRIDENT_CHECK(x.numel() > 0, "mean: empty tensor of shape {}", x.shape());
  const double s = TRIDENT_KERNEL(x.device(), sum_all, x.dtype(), x.raw_data(), x.numel());
  return Tensor::full(Shape{}, s / static_cast<double>(x.numel()), x.dtype(), x.device());
}

Tensor sum_to_last_dim(const Tensor& x) {
  check_defined(x, "sum_to_last_dim", "x");
  check_floating(x, "sum_to_last_dim", "x");
  TRIDENT_CHECK(x.rank() >= 1, "sum_to_last_dim: tensor of shape {} has no last dimension", x.shape());
  const std::int64_t cols = x.size(-1);
  Tensor out = Tensor::empty(Shape{cols}, x.dtype(), x.device());
  TRIDENT_KERNEL(x.device(), sum_rows, x.dtype(), x.raw_data(), out.raw_data(), cols ? x.numel() / cols : 0, cols);
  return out;
}

}  // namespace trident::ops
