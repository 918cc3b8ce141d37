// Op-table cases for the fused AdamW step (not differentiable: reference only).
// The forward runs three steps on copies of the inputs and returns the updated
// parameter; the reference is a naive f64 AdamW written from torch.optim.AdamW's
// single-tensor algorithm. Cases cover fresh and warm optimizer state, both
// branches of PyTorch's lerp (1 - beta1 below and above 0.5), grad_scale, and
// bf16 gradients with a bf16 compute copy written in the same pass.
#include <cmath>

#include "op_table.h"
#include "trident/autograd/autograd.h"
#include "trident/ops/optimizer.h"
#include "trident/ops/shape.h"

namespace trident::testing {
namespace {

constexpr int kSteps = 3;

struct AdamWCase {
  ops::AdamWConfig config;
  std::int64_t first_step = 1;
  double grad_scale = 1.0;
  bool warm_state = false;
};

// inputs: param, exp_avg, exp_avg_sq, grad_1 .. grad_kSteps (all f64 here).
Tensor reference_adamw(const std::vector<Tensor>& in, const AdamWCase& k) {
  auto p = values(in[0]), m = values(in[1]), v = values(in[2]);
  const auto& c = k.config;
  for (int s = 0; s < kSteps; ++s) {
    const auto grad = values(in[static_cast<std::size_t>(3 + s)]);
    const double t = static_cast<double>(k.first_step + s);
    const double bias1 = 1 - std::pow(c.beta1, t), bias2 = 1 - std::pow(c.beta2, t);
    const double w = 1 - c.beta1;
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = grad[i] * k.grad_scale;
      p[i] *= 1 - c.lr * c.weight_decay;
      m[i] = std::fabs(w) < 0.5 ? m[i] + w * (g - m[i]) : g - (g - m[i]) * (1 - w);
      v[i] = v[i] * c.beta2 + (1 - c.beta2) * g * g;
      const double denom = std::sqrt(v[i]) / std::sqrt(bias2) + c.eps;
      p[i] += (-(c.lr / bias1) * m[i]) / denom;
    }
  }
  return tensor_from(p, in[0].shape());
}

OpCase adamw_case(std::string name, Shape shape, AdamWCase k, bool bf16_grads) {
  OpCase c;
  c.name = std::move(name);
  c.op = ops::Op::adamw;
  c.gradcheck = false;
  c.make_inputs = [=](std::mt19937_64& g) {
    std::vector<Variable> in{constant(random_tensor(g, shape)),
                             constant(k.warm_state ? random_tensor(g, shape, -0.1, 0.1) : Tensor::zeros(shape, DType::f64)),
                             constant(k.warm_state ? random_tensor(g, shape, 0.0, 0.02) : Tensor::zeros(shape, DType::f64))};
    for (int s = 0; s < kSteps; ++s) in.push_back(constant(random_tensor(g, shape)));
    return in;
  };
  c.forward = [k, bf16_grads](const std::vector<Variable>& in) {
    // Master weights and states stay f32 when the table hands bf16 inputs over.
    const DType master = in[0].dtype() == DType::f64 ? DType::f64 : DType::f32;
    Tensor p = in[0].data().to(master).clone(), m = in[1].data().to(master).clone(), v = in[2].data().to(master).clone();
    Tensor copy = Tensor::empty(p.shape(), DType::bf16);
    for (int s = 0; s < kSteps; ++s) {
      ops::adamw_step(p, in[static_cast<std::size_t>(3 + s)].data(), m, v, k.config, k.first_step + s, k.grad_scale,
                      bf16_grads ? &copy : nullptr);
    }
    return Variable(bf16_grads ? copy : p, false);
  };
  c.reference = [k](const std::vector<Tensor>& in) { return reference_adamw(in, k); };
  if (bf16_grads) {
    c.dtypes = {{DType::bf16, 8e-3}};  // the returned copy is rounded to bf16 (2^-8 relative)
  } else {
    c.dtypes = {{DType::f64, 1e-14}, {DType::f32, 2e-6}};
  }
  return c;
}

// adamw_step_multi over two tensors of different shapes; returns both updated
// parameters, flattened and concatenated. Inputs: (param, exp_avg, exp_avg_sq,
// grad_1 .. grad_kSteps) for the first tensor, then the same for the second.
OpCase adamw_multi_case(std::string name, Shape a, Shape b, AdamWCase k) {
  OpCase c;
  c.name = std::move(name);
  c.op = ops::Op::adamw_step_multi;
  c.gradcheck = false;
  constexpr std::size_t kPer = 3 + kSteps;
  c.make_inputs = [=](std::mt19937_64& g) {
    std::vector<Variable> in;
    for (const Shape& s : {a, b}) {
      in.push_back(constant(random_tensor(g, s)));
      in.push_back(constant(random_tensor(g, s, -0.1, 0.1)));
      in.push_back(constant(random_tensor(g, s, 0.0, 0.02)));
      for (int step = 0; step < kSteps; ++step) in.push_back(constant(random_tensor(g, s)));
    }
    return in;
  };
  c.forward = [k](const std::vector<Variable>& in) {
    const DType master = in[0].dtype() == DType::f64 ? DType::f64 : DType::f32;
    std::vector<Tensor> state;
    for (std::size_t t = 0; t < 2; ++t) {
      for (std::size_t j = 0; j < 3; ++j) state.push_back(in[t * kPer + j].data().to(master).clone());
    }
    for (int s = 0; s < kSteps; ++s) {
      std::vector<Tensor> grads;
      for (std::size_t t = 0; t < 2; ++t) grads.push_back(in[t * kPer + 3 + static_cast<std::size_t>(s)].data());
      std::vector<ops::AdamWTensors> list;
      for (std::size_t t = 0; t < 2; ++t) {
        list.push_back({&state[3 * t], &grads[t], &state[3 * t + 1], &state[3 * t + 2]});
      }
      ops::adamw_step_multi(list, k.config, k.first_step + s, k.grad_scale);
    }
    return Variable(ops::concat({ops::reshape(state[0], {-1}), ops::reshape(state[3], {-1})}, 0), false);
  };
  c.reference = [k](const std::vector<Tensor>& in) {
    std::vector<Tensor> first(in.begin(), in.begin() + kPer), second(in.begin() + kPer, in.end());
    auto p = values(reference_adamw(first, k));
    const auto q = values(reference_adamw(second, k));
    p.insert(p.end(), q.begin(), q.end());
    return tensor_from(p, Shape{static_cast<std::int64_t>(p.size())});
  };
  c.dtypes = {{DType::f64, 1e-14}, {DType::f32, 2e-6}};
  return c;
}

struct SgdCase {
  double lr = 0.1, momentum = 0.0, weight_decay = 0.0, dampening = 0.0;
  bool nesterov = false;
  double grad_scale = 1.0;
};

// torch.optim.SGD's single-tensor algorithm in f64; inputs: param, grad_1 .. grad_kSteps.
Tensor reference_sgd(const std::vector<Tensor>& in, const SgdCase& k) {
  auto p = values(in[0]);
  std::vector<double> buf;
  for (int s = 0; s < kSteps; ++s) {
    const auto grad = values(in[static_cast<std::size_t>(1 + s)]);
    if (buf.empty()) buf.assign(p.size(), 0.0);
    for (std::size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] * k.grad_scale + k.weight_decay * p[i];
      if (k.momentum != 0) {
        buf[i] = s == 0 ? g : k.momentum * buf[i] + (1 - k.dampening) * g;
        g = k.nesterov ? g + k.momentum * buf[i] : buf[i];
      }
      p[i] -= k.lr * g;
    }
  }
  return tensor_from(p, in[0].shape());
}

OpCase sgd_case(std::string name, Shape shape, SgdCase k) {
  OpCase c;
  c.name = std::move(name);
  c.op = ops::Op::sgd_step;
  c.gradcheck = false;
  c.make_inputs = [=](std::mt19937_64& g) {
    std::vector<Variable> in{constant(random_tensor(g, shape))};
    for (int s = 0; s < kSteps; ++s) in.push_back(constant(random_tensor(g, shape)));
    return in;
  };
  c.forward = [k](const std::vector<Variable>& in) {
    const DType master = in[0].dtype() == DType::f64 ? DType::f64 : DType::f32;
    Tensor p = in[0].data().to(master).clone();
    Tensor buf;  // undefined before the first step, as PyTorch's None
    for (int s = 0; s < kSteps; ++s) {
      ops::sgd_step(p, in[static_cast<std::size_t>(1 + s)].data(), buf, k.lr, k.momentum, k.weight_decay, k.dampening,
                    k.nesterov, k.grad_scale);
    }
    return Variable(p, false);
  };
  c.reference = [k](const std::vector<Tensor>& in) { return reference_sgd(in, k); };
  c.dtypes = {{DType::f64, 1e-14}, {DType::f32, 2e-6}};
  return c;
}

std::vector<OpCase> make_optimizer_cases() {
  AdamWCase fresh{.config = {.lr = 1e-2, .weight_decay = 0.1}, .grad_scale = 0.5};
  // 1 - beta1 = 0.7 takes PyTorch's other lerp branch; warm state resumes at step 5.
  AdamWCase warm{.config = {.lr = 3e-3, .beta1 = 0.3, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.0},
                 .first_step = 5,
                 .warm_state = true};
  AdamWCase mixed{.config = {.lr = 1e-2, .weight_decay = 0.05}, .grad_scale = 0.25, .warm_state = true};
  return {
      adamw_case("adamw_fresh_state", {4, 9}, fresh, false),
      adamw_case("adamw_warm_state_large_lerp_weight", {37}, warm, false),
      adamw_case("adamw_bf16_grads_bf16_copy", {3, 21}, mixed, true),
      adamw_multi_case("adamw_step_multi_two_tensors", {4, 9}, {37}, warm),
      sgd_case("sgd_plain", {4, 9}, SgdCase{.lr = 0.05}),
      sgd_case("sgd_momentum_weight_decay", {37}, SgdCase{.lr = 0.02, .momentum = 0.9, .weight_decay = 0.01,
                                                          .dampening = 0.1, .grad_scale = 0.5}),
      sgd_case("sgd_nesterov", {3, 7}, SgdCase{.lr = 0.03, .momentum = 0.8, .nesterov = true}),
  };
}

TRIDENT_OP_CASES(make_optimizer_cases);

}  // namespace
}  // namespace trident::testing
