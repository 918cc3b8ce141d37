#include "trident/ops/dropout.h"

#include <cmath>

#include "trident/kernels/cpu/dropout.h"
#include "trident/ops/dispatch.h"

namespace trident::ops {

namespace {

Tensor apply_dropout(std::string_view op, std::string_view name, const Tensor& x, double p, const CounterRng& rng,
                     const GlobalSlice& slice) {
  check_defined(x, op, name);
  check_floating(x, op, name);
  TRIDENT_CHECK(std::isfinite(p) && p >= 0.0 && p < 1.0, "{}: p must be in [0, 1), got {} (tensor of shape {})", op, p,
                x.shape());
  const Shape& local = x.shape();
  if (!slice.empty()) {
    const std::size_t r = local.rank();
    TRIDENT_CHECK(slice.global_shape.rank() == r && slice.offsets.size() == r,
                  "{}: global slice of shape {} with {} offsets does not match {} of shape {}", op,
                  slice.global_shape, slice.offsets.size(), name, local);
    for (std::size_t d = 0; d < r; ++d) {
      TRIDENT_CHECK(slice.offsets[d] >= 0 && slice.offsets[d] + local[d] <= slice.global_shape[d],
                    "{}: {} of shape {} at offsets [{}] does not fit in the global shape {}", op, name, local,
                    fmt::join(slice.offsets, ", "), slice.global_shape);
    }
  }
  if (p == 0.0) return x;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  TRIDENT_KERNEL(x.device(), dropout, x.dtype(), x.raw_data(), y.raw_data(), local, p, rng, slice);
  return y;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, const CounterRng& rng, const GlobalSlice& slice) {
  return apply_dropout("dropout", "x", x, p, rng, slice);
}

Tensor dropout_backward(const Tensor& dy, double p, const CounterRng& rng, const GlobalSlice& slice) {
  return apply_dropout("dropout_backward", "dy", dy, p, rng, slice);
}

}  // namespace trident::ops
