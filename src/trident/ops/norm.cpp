#include "trident/ops/norm.h"

#include <cmath>

#include "trident/kernels/cpu/norm.h"
#include "trident/ops/dispatch.h"

namespace trident::ops {

namespace {

DType stat_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

// Checks x [..., C] and a [C] parameter of x's dtype and device; returns C.
std::int64_t check_row_param(const Tensor& x, const Tensor& p, std::string_view op, std::string_view name) {
  check_defined(p, op, name);
  TRIDENT_CHECK(p.rank() == 1 && p.size(0) == x.size(-1), "{}: {} of shape {} does not match the last dimension of x {}",
                op, name, p.shape(), x.shape());
  TRIDENT_CHECK(p.dtype() == x.dtype(), "{}: {} has dtype {} (shape {}) but x has dtype {} (shape {})", op, name,
                p.dtype(), p.shape(), x.dtype(), x.shape());
  check_same_device(x, p, op);
  return x.size(-1);
}

void check_input(const Tensor& x, std::string_view op) {
  check_defined(x, op, "x");
  check_floating(x, op, "x");
  TRIDENT_CHECK(x.rank() >= 1 && x.size(-1) >= 1, "{}: x of shape {} needs a non-empty last dimension", op, x.shape());
}

void check_eps(double eps, std::string_view op) {
  TRIDENT_CHECK(std::isfinite(eps) && eps >= 0.0, "{}: eps must be finite and non-negative, got {}", op, eps);
}

// dy like x; a saved statistic of shape [rows] in the statistics dtype.
void check_backward_args(const Tensor& dy, const Tensor& x, std::string_view op) {
  check_defined(dy, op, "dy");
  TRIDENT_CHECK(dy.shape() == x.shape(), "{}: dy of shape {} does not match x of shape {}", op, dy.shape(), x.shape());
  TRIDENT_CHECK(dy.dtype() == x.dtype(), "{}: dy has dtype {} (shape {}) but x has dtype {} (shape {})", op,
                dy.dtype(), dy.shape(), x.dtype(), x.shape());
  check_same_device(dy, x, op);
}

void check_stat(const Tensor& s, const Tensor& x, std::string_view op, std::string_view name) {
  check_defined(s, op, name);
  const std::int64_t rows = x.numel() / x.size(-1);
  TRIDENT_CHECK(s.rank() == 1 && s.size(0) == rows, "{}: {} of shape {} does not match the {} rows of x {}", op, name,
                s.shape(), rows, x.shape());
  TRIDENT_CHECK(s.dtype() == stat_dtype(x.dtype()), "{}: {} has dtype {} (shape {}), expected {} for x of dtype {}", op,
                name, s.dtype(), s.shape(), stat_dtype(x.dtype()), x.dtype());
  check_same_device(s, x, op);
}

}  // namespace

LayerNormOutput layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  constexpr std::string_view op = "layer_norm";
  check_input(x, op);
  const std::int64_t cols = check_row_param(x, weight, op, "weight");
  if (bias.defined()) check_row_param(x, bias, op, "bias");
  check_eps(eps, op);
  const std::int64_t rows = x.numel() / cols;
  LayerNormOutput out{Tensor::empty(x.shape(), x.dtype(), x.device()),
                      Tensor::empty({rows}, stat_dtype(x.dtype()), x.device()),
                      Tensor::empty({rows}, stat_dtype(x.dtype()), x.device())};
  TRIDENT_KERNEL(x.device(), layer_norm_forward, x.dtype(), x.raw_data(), weight.raw_data(),
                 bias.defined() ? bias.raw_data() : nullptr, out.y.raw_data(), out.mean.raw_data(),
                 out.rstd.raw_data(), rows, cols, eps);
  return out;
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd) {
  constexpr std::string_view op = "layer_norm_backward";
  check_input(x, op);
  const std::int64_t cols = check_row_param(x, weight, op, "weight");
  check_backward_args(dy, x, op);
  check_stat(mean, x, op, "mean");
  check_stat(rstd, x, op, "rstd");
  const std::int64_t rows = x.numel() / cols;
  LayerNormGrads g{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty({cols}, x.dtype(), x.device()),
                   Tensor::empty({cols}, x.dtype(), x.device())};
  TRIDENT_KERNEL(x.device(), layer_norm_backward, x.dtype(), dy.raw_data(), x.raw_data(), weight.raw_data(),
                 mean.raw_data(), rstd.raw_data(), g.dx.raw_data(), g.dweight.raw_data(), g.dbias.raw_data(), rows,
                 cols);
  return g;
}

RmsNormOutput rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  constexpr std::string_view op = "rms_norm";
  check_input(x, op);
  const std::int64_t cols = check_row_param(x, weight, op, "weight");
  check_eps(eps, op);
  const std::int64_t rows = x.numel() / cols;
  RmsNormOutput out{Tensor::empty(x.shape(), x.dtype(), x.device()),
                    Tensor::empty({rows}, stat_dtype(x.dtype()), x.device())};
  TRIDENT_KERNEL(x.device(), rms_norm_forward, x.dtype(), x.raw_data(), weight.raw_data(), out.y.raw_data(),
                 out.rstd.raw_data(), rows, cols, eps);
  return out;
}

RmsNormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd) {
  constexpr std::string_view op = "rms_norm_backward";
  check_input(x, op);
  const std::int64_t cols = check_row_param(x, weight, op, "weight");
  check_backward_args(dy, x, op);
  check_stat(rstd, x, op, "rstd");
  const std::int64_t rows = x.numel() / cols;
  RmsNormGrads g{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty({cols}, x.dtype(), x.device())};
  TRIDENT_KERNEL(x.device(), rms_norm_backward, x.dtype(), dy.raw_data(), x.raw_data(), weight.raw_data(),
                 rstd.raw_data(), g.dx.raw_data(), g.dweight.raw_data(), rows, cols);
  return g;
}

}  // namespace trident::ops
