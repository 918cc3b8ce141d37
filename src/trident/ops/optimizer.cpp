#include "trident/ops/optimizer.h"

#include <cmath>

#include "trident/kernels/cpu/optimizer.h"
#include "trident/ops/dispatch.h"

namespace trident::ops {

namespace {
void check_param(const Tensor& param, std::string_view op) {
  check_defined(param, op, "param");
  TRIDENT_CHECK(param.dtype() == DType::f32 || param.dtype() == DType::f64,
                "{}: param has dtype {} (shape {}), expected f32 or f64 master weights", op, param.dtype(),
                param.shape());
}

void check_like_param(const Tensor& param, const Tensor& t, std::string_view op, std::string_view arg) {
  check_defined(t, op, arg);
  TRIDENT_CHECK(t.shape() == param.shape(), "{}: {} has shape {}, expected the param's shape {}", op, arg, t.shape(),
                param.shape());
  check_same_device(param, t, op);
}

// True when the byte ranges of a and b share memory (the step writes all of them).
bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  return a.byte_offset() < b.byte_offset() + b.nbytes() && b.byte_offset() < a.byte_offset() + a.nbytes();
}

void check_state(const Tensor& param, const Tensor& t, std::string_view op, std::string_view arg) {
  check_like_param(param, t, op, arg);
  check_dtype(t, param.dtype(), op, arg);
  TRIDENT_CHECK(!overlaps(t, param), "{}: {} overlaps param in memory (shape {})", op, arg, param.shape());
}
}  // namespace

namespace {

// Validates one tensor's AdamW step and returns its kernel hyper-parameters.
kernels::cpu::AdamWHyper check_adamw(std::string_view op, const Tensor& param, const Tensor& grad,
                                     const Tensor& exp_avg, const Tensor& exp_avg_sq, const AdamWConfig& config,
                                     std::int64_t step, double grad_scale) {
  check_param(param, op);
  check_like_param(param, grad, op, "grad");
  check_floating(grad, op, "grad");
  check_state(param, exp_avg, op, "exp_avg");
  check_state(param, exp_avg_sq, op, "exp_avg_sq");
  TRIDENT_CHECK(!overlaps(exp_avg, exp_avg_sq), "{}: exp_avg and exp_avg_sq overlap in memory (shape {})", op,
                param.shape());
  TRIDENT_CHECK(step >= 1, "{}: step {} must be >= 1 (bias correction is 1-based)", op, step);
  TRIDENT_CHECK(config.lr >= 0, "{}: learning rate {} must be >= 0", op, config.lr);
  TRIDENT_CHECK(config.eps >= 0, "{}: eps {} must be >= 0", op, config.eps);
  TRIDENT_CHECK(config.beta1 >= 0 && config.beta1 < 1, "{}: beta1 {} must be in [0, 1)", op, config.beta1);
  TRIDENT_CHECK(config.beta2 >= 0 && config.beta2 < 1, "{}: beta2 {} must be in [0, 1)", op, config.beta2);
  TRIDENT_CHECK(config.weight_decay >= 0, "{}: weight_decay {} must be >= 0", op, config.weight_decay);
  TRIDENT_CHECK(std::isfinite(grad_scale), "{}: grad_scale {} must be finite", op, grad_scale);
  kernels::cpu::AdamWHyper hyper;
  hyper.lr = config.lr;
  hyper.beta1 = config.beta1;
  hyper.beta2 = config.beta2;
  hyper.eps = config.eps;
  hyper.weight_decay = config.weight_decay;
  hyper.bias_correction = config.bias_correction;
  hyper.step = step;
  hyper.grad_scale = grad_scale;
  return hyper;
}

void check_param_copy(std::string_view op, const Tensor& param, const Tensor& param_copy) {
  check_like_param(param, param_copy, op, "param_copy");
  check_floating(param_copy, op, "param_copy");
  TRIDENT_CHECK(!overlaps(param_copy, param), "{}: param_copy overlaps param in memory (shape {})", op, param.shape());
}

}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWConfig& config,
                std::int64_t step, double grad_scale, Tensor* param_copy) {
  constexpr std::string_view op = "adamw_step";
  const kernels::cpu::AdamWHyper hyper = check_adamw(op, param, grad, exp_avg, exp_avg_sq, config, step, grad_scale);
  void* copy_data = nullptr;
  DType copy_dtype = param.dtype();
  if (param_copy != nullptr) {
    check_param_copy(op, param, *param_copy);
    copy_data = param_copy->raw_data();
    copy_dtype = param_copy->dtype();
  }
  TRIDENT_KERNEL(param.device(), adamw_step, param.dtype(), grad.dtype(), copy_dtype, param.raw_data(),
                 grad.raw_data(), exp_avg.raw_data(), exp_avg_sq.raw_data(), copy_data, param.numel(), hyper);
}

void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWConfig& config, std::int64_t step,
                      double grad_scale) {
  constexpr std::string_view op = "adamw_step_multi";
  if (tensors.empty()) return;
  const AdamWTensors& first = tensors.front();
  bool one_launch = first.param->device().is_cuda();
  kernels::cpu::AdamWHyper hyper;
  auto copy_dtype = [](const AdamWTensors& t) { return t.param_copy ? t.param_copy->dtype() : t.param->dtype(); };
  for (const AdamWTensors& t : tensors) {
    hyper = check_adamw(op, *t.param, *t.grad, *t.exp_avg, *t.exp_avg_sq, config, step, grad_scale);
    if (t.param_copy) check_param_copy(op, *t.param, *t.param_copy);
    one_launch = one_launch && t.param->device() == first.param->device() && t.param->dtype() == first.param->dtype() &&
                 t.grad->dtype() == first.grad->dtype() && (t.param_copy != nullptr) == (first.param_copy != nullptr) &&
                 copy_dtype(t) == copy_dtype(first);
  }
#if TRIDENT_HAVE_CUDA
  if (one_launch) {
    std::vector<kernels::cuda::AdamWTensor> table;
    table.reserve(tensors.size());
    for (const AdamWTensors& t : tensors) {
      table.push_back({t.param->raw_data(), t.grad->raw_data(), t.exp_avg->raw_data(), t.exp_avg_sq->raw_data(),
                       t.param_copy ? t.param_copy->raw_data() : nullptr, t.param->numel()});
    }
    kernels::cuda::DeviceGuard guard(first.param->device().index);
    kernels::cuda::adamw_step_multi(first.param->dtype(), first.grad->dtype(), copy_dtype(first), table.data(),
                                    table.size(), hyper);
    return;
  }
#else
  (void)one_launch;
#endif
  for (const AdamWTensors& t : tensors) {
    TRIDENT_KERNEL(t.param->device(), adamw_step, t.param->dtype(), t.grad->dtype(), copy_dtype(t),
                   t.param->raw_data(), t.grad->raw_data(), t.exp_avg->raw_data(), t.exp_avg_sq->raw_data(),
                   t.param_copy ? t.param_copy->raw_data() : nullptr, t.param->numel(), hyper);
  }
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr, double momentum,
              double weight_decay, double dampening, bool nesterov, double grad_scale, bool fresh_buf) {
  constexpr std::string_view op = "sgd_step";
  check_param(param, op);
  check_like_param(param, grad, op, "grad");
  check_floating(grad, op, "grad");
  TRIDENT_CHECK(lr >= 0, "{}: learning rate {} must be >= 0", op, lr);
  TRIDENT_CHECK(momentum >= 0, "{}: momentum {} must be >= 0", op, momentum);
  TRIDENT_CHECK(weight_decay >= 0, "{}: weight_decay {} must be >= 0", op, weight_decay);
  TRIDENT_CHECK(!nesterov || (momentum > 0 && dampening == 0),
                "{}: nesterov momentum needs momentum > 0 and dampening 0 (got momentum {}, dampening {})", op,
                momentum, dampening);
  TRIDENT_CHECK(std::isfinite(grad_scale), "{}: grad_scale {} must be finite", op, grad_scale);
  bool init_buf = fresh_buf;
  if (momentum != 0) {
    if (!momentum_buf.defined()) {
      momentum_buf = Tensor::empty(param.shape(), param.dtype(), param.device());
      init_buf = true;
    }
    check_state(param, momentum_buf, op, "momentum_buf");
  }
  TRIDENT_KERNEL(param.device(), sgd_step, param.dtype(), grad.dtype(), param.raw_data(), grad.raw_data(),
                 momentum != 0 ? momentum_buf.raw_data() : nullptr, init_buf, param.numel(), lr, momentum,
                 weight_decay, dampening, nesterov, grad_scale);
}

double sum_of_squares(const Tensor& t) {
  check_defined(t, "sum_of_squares", "t");
  check_floating(t, "sum_of_squares", "t");
  return TRIDENT_KERNEL(t.device(), sum_of_squares, t.dtype(), t.raw_data(), t.numel());
}

}  // namespace trident::ops
