#include "trident/optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "trident/core/memory.h"
#include "trident/ops/optimizer.h"

namespace trident::optim {

Optimizer::Optimizer(std::vector<nn::Parameter*> params) : params_(std::move(params)) {
  for (const nn::Parameter* p : params_) {
    TRIDENT_CHECK(p->var.defined(), "optimizer: parameter '{}' is not initialised", p->name);
  }
}

void Optimizer::zero_grad() {
  for (nn::Parameter* p : params_) p->var.zero_grad();
}

namespace {
Tensor zero_state(const nn::Parameter& p, const StateSpec& spec) {
  MemoryCategoryScope scope(MemoryCategory::optimizer);
  return Tensor::zeros(p.var.shape(), spec.dtype_for(p.var.dtype()), p.var.device());
}

std::string state_key(const StateSpec& spec, const nn::Parameter& p) { return spec.name + "/" + p.name; }
}  // namespace

RuleOptimizer::RuleOptimizer(std::vector<nn::Parameter*> params, Method method)
    : Optimizer(std::move(params)), method_(std::move(method)) {}

void RuleOptimizer::step(double lr, double grad_scale) {
  ++step_;
  const OptimizerDef& def = method_.def();
  StepArgs args{lr, grad_scale, step_, state_.empty(), [](std::span<double>) {}};  // whole parameters: nothing to add
  if (state_.empty()) {
    for (const nn::Parameter* p : params_) {
      std::vector<Tensor>& s = state_.emplace_back();
      for (const StateSpec& spec : def.states) s.push_back(zero_state(*p, spec));
    }
  }
  // The compute-dtype copies the forward pass made of the master weights
  // (mixed precision) are rewritten in the same pass as the update by a rule
  // that can, unless a live graph still holds one (then it is dropped).
  std::vector<Tensor> data(params_.size()), grads(params_.size()), copies(params_.size());
  std::vector<ParamUpdate> updates(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = *params_[i];
    data[i] = p.var.data();
    grads[i] = p.var.grad().defined() ? p.var.grad() : Tensor::zeros(p.var.shape(), p.var.dtype(), p.var.device());
    if (def.writes_compute_copy) copies[i] = p.var.compute_copy();
    // Held by a graph not yet run backward (retain_graph, or a forward built
    // before this step): leave it to that graph and convert afresh next time.
    if (copies[i].defined() && copies[i].storage().use_count() > 2) copies[i] = Tensor();
    updates[i] = {&p, &data[i], &grads[i], state_[i], copies[i].defined() ? &copies[i] : nullptr};
  }
  def.step(method_, updates, args);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    params_[i]->var.mark_data_changed();
    if (copies[i].defined()) params_[i]->var.set_compute_copy(copies[i]);
  }
}

void RuleOptimizer::set_method(Method method) {
  TRIDENT_CHECK(&method.def() == &method_.def(), "optimizer: set_method from {} to {}: the state would not fit",
                method_.def().name, method.def().name);
  method_ = std::move(method);
}

std::map<std::string, Tensor> RuleOptimizer::state() const {
  std::map<std::string, Tensor> out;
  const std::vector<StateSpec>& specs = method_.def().states;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    for (std::size_t k = 0; k < specs.size(); ++k)
      out[state_key(specs[k], *params_[i])] = state_.empty() ? zero_state(*params_[i], specs[k]) : state_[i][k];
  }
  return out;
}

void RuleOptimizer::load_state(const std::map<std::string, Tensor>& state) {
  const std::vector<StateSpec>& specs = method_.def().states;
  std::vector<std::vector<Tensor>> loaded(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const nn::Parameter& p = *params_[i];
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const std::string key = state_key(specs[k], p);
      auto it = state.find(key);
      TRIDENT_CHECK(it != state.end(), "optimizer state: missing '{}'", key);
      TRIDENT_CHECK(it->second.shape() == p.var.shape(), "optimizer state '{}' has shape {}, expected {}", key,
                    it->second.shape(), p.var.shape());
      Tensor dst = state_.empty() ? zero_state(p, specs[k]) : state_[i][k];
      dst.copy_from(it->second.to(dst.dtype()));
      loaded[i].push_back(std::move(dst));
    }
  }
  state_ = std::move(loaded);
}

double grad_sum_of_squares(const std::vector<nn::Parameter*>& params) {
  double total = 0;
  for (const nn::Parameter* p : params) {
    if (p->var.grad().defined()) total += ops::sum_of_squares(p->var.grad());
  }
  return total;
}

bool grads_have_inf_or_nan(const std::vector<nn::Parameter*>& params) {
  return !std::isfinite(grad_sum_of_squares(params));
}

double clip_coefficient(double total_norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(total_norm)) return 1.0;
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

}  // namespace trident::optim
