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

double Optimizer::grad_sum_of_squares(const std::vector<nn::Parameter*>& subset) {
  return optim::grad_sum_of_squares(subset);
}

std::map<std::string, Optimizer::Shard> Optimizer::owned_state() const {
  std::map<std::string, Shard> out;
  for (auto& [key, tensor] : state()) out.emplace(key, Shard{tensor, 0});
  return out;
}

void Optimizer::load_owned_state(const ReadRows& read) {
  std::map<std::string, Tensor> loaded;
  for (const auto& [key, tensor] : state()) {
    const std::int64_t rows = tensor.rank() ? tensor.shape()[0] : 1;
    loaded[key] = read(key, 0, rows, tensor.dtype());
  }
  load_state(loaded);
}

namespace {
Tensor zeros_like_param(const nn::Parameter& p) {
  MemoryCategoryScope scope(MemoryCategory::optimizer);
  return Tensor::zeros(p.var.shape(), p.var.dtype(), p.var.device());
}

void load_named(const std::map<std::string, Tensor>& state, const std::string& key, const nn::Parameter& p,
                Tensor& dst) {
  auto it = state.find(key);
  TRIDENT_CHECK(it != state.end(), "optimizer state: missing '{}'", key);
  TRIDENT_CHECK(it->second.shape() == p.var.shape(), "optimizer state '{}' has shape {}, expected {}", key,
                it->second.shape(), p.var.shape());
  if (!dst.defined()) dst = zeros_like_param(p);
  dst.copy_from(it->second.to(dst.dtype()));
}
}  // namespace

AdamW::AdamW(std::vector<nn::Parameter*> params, AdamWOptions options)
    : Optimizer(std::move(params)), options_(options), exp_avg_(params_.size()), exp_avg_sq_(params_.size()) {}

void AdamW::step(double lr, double grad_scale) {
  ++step_;
  // Two groups (with and without weight decay), each one multi-tensor step:
  // a single kernel launch per group on a GPU.
  // The compute-dtype copies the forward pass made of the master weights
  // (mixed precision) are rewritten in the same pass as the update, unless a
  // live graph still holds one (then it is dropped).
  std::vector<Tensor> data(params_.size()), grads(params_.size()), copies(params_.size());
  std::vector<ops::AdamWTensors> decayed, plain;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = *params_[i];
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = zeros_like_param(p);
      exp_avg_sq_[i] = zeros_like_param(p);
    }
    data[i] = p.var.data();
    grads[i] = p.var.grad().defined() ? p.var.grad() : Tensor::zeros(p.var.shape(), p.var.dtype(), p.var.device());
    copies[i] = p.var.compute_copy();
    // Held by a graph not yet run backward (retain_graph, or a forward built
    // before this step): leave it to that graph and convert afresh next time.
    if (copies[i].defined() && copies[i].storage().use_count() > 2) copies[i] = Tensor();
    (p.weight_decay ? decayed : plain)
        .push_back({&data[i], &grads[i], &exp_avg_[i], &exp_avg_sq_[i], copies[i].defined() ? &copies[i] : nullptr});
  }
  const ops::AdamWConfig cfg{lr, options_.beta1, options_.beta2, options_.eps, options_.weight_decay};
  ops::adamw_step_multi(decayed, cfg, step_, grad_scale);
  ops::adamw_step_multi(plain, ops::AdamWConfig{lr, options_.beta1, options_.beta2, options_.eps, 0.0}, step_,
                        grad_scale);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!data[i].defined()) continue;
    params_[i]->var.mark_data_changed();
    if (copies[i].defined()) params_[i]->var.set_compute_copy(copies[i]);
  }
}

std::map<std::string, Tensor> AdamW::state() const {
  std::map<std::string, Tensor> out;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const std::string& n = params_[i]->name;
    out["exp_avg/" + n] = exp_avg_[i].defined() ? exp_avg_[i] : zeros_like_param(*params_[i]);
    out["exp_avg_sq/" + n] = exp_avg_sq_[i].defined() ? exp_avg_sq_[i] : zeros_like_param(*params_[i]);
  }
  return out;
}

void AdamW::load_state(const std::map<std::string, Tensor>& state) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    load_named(state, "exp_avg/" + params_[i]->name, *params_[i], exp_avg_[i]);
    load_named(state, "exp_avg_sq/" + params_[i]->name, *params_[i], exp_avg_sq_[i]);
  }
}

SGD::SGD(std::vector<nn::Parameter*> params, SGDOptions options)
    : Optimizer(std::move(params)), options_(options), momentum_(params_.size()) {}

void SGD::step(double lr, double grad_scale) {
  ++step_;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = *params_[i];
    Tensor data = p.var.data();
    const Tensor grad = p.var.grad().defined() ? p.var.grad() : Tensor::zeros(p.var.shape(), p.var.dtype(), p.var.device());
    // An undefined buffer is PyTorch's None: the kernel allocates it and starts it at the first gradient.
    MemoryCategoryScope scope(MemoryCategory::optimizer);
    ops::sgd_step(data, grad, momentum_[i], lr, options_.momentum,
                  p.weight_decay ? options_.weight_decay : 0.0, 0.0, options_.nesterov, grad_scale);
    p.var.mark_data_changed();
  }
}

std::map<std::string, Tensor> SGD::state() const {
  std::map<std::string, Tensor> out;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out["momentum/" + params_[i]->name] = momentum_[i].defined() ? momentum_[i] : zeros_like_param(*params_[i]);
  }
  return out;
}

void SGD::load_state(const std::map<std::string, Tensor>& state) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    load_named(state, "momentum/" + params_[i]->name, *params_[i], momentum_[i]);
  }
}

namespace {
std::vector<nn::Parameter*> all_params(const std::vector<std::unique_ptr<Optimizer>>& members) {
  std::vector<nn::Parameter*> out;
  for (const auto& m : members) out.insert(out.end(), m->params().begin(), m->params().end());
  return out;
}
}  // namespace

OptimizerGroups::OptimizerGroups(std::vector<std::unique_ptr<Optimizer>> members)
    : Optimizer(all_params(members)), members_(std::move(members)) {}

void OptimizerGroups::step(double lr, double grad_scale) {
  ++step_;
  for (auto& m : members_) m->step(lr, grad_scale);
}

void OptimizerGroups::zero_grad() {
  for (auto& m : members_) m->zero_grad();
}

void OptimizerGroups::reduce_gradients(bool last) {
  for (auto& m : members_) m->reduce_gradients(last);
}

double OptimizerGroups::grad_sum_of_squares(const std::vector<nn::Parameter*>& subset) {
  double total = 0;
  for (auto& m : members_) {  // every member, even with none of `subset`: its sum may be a collective
    std::vector<nn::Parameter*> mine;
    for (nn::Parameter* p : subset)
      if (std::find(m->params().begin(), m->params().end(), p) != m->params().end()) mine.push_back(p);
    total += m->grad_sum_of_squares(mine);
  }
  return total;
}

void OptimizerGroups::set_step(std::int64_t step) {
  step_ = step;
  for (auto& m : members_) m->set_step(step);
}

std::map<std::string, Tensor> OptimizerGroups::state() const {
  std::map<std::string, Tensor> out;
  for (const auto& m : members_) out.merge(m->state());
  return out;
}

void OptimizerGroups::load_state(const std::map<std::string, Tensor>& state) {
  for (auto& m : members_) {
    std::map<std::string, Tensor> mine;
    for (const auto& [key, tensor] : m->state()) {
      auto it = state.find(key);
      TRIDENT_CHECK(it != state.end(), "optimizer state: missing '{}'", key);
      mine.emplace(key, it->second);
    }
    m->load_state(mine);
  }
}

bool OptimizerGroups::partitioned() const noexcept {
  return std::any_of(members_.begin(), members_.end(), [](const auto& m) { return m->partitioned(); });
}

std::map<std::string, Optimizer::Shard> OptimizerGroups::owned_state() const {
  std::map<std::string, Shard> out;
  for (const auto& m : members_) out.merge(m->owned_state());
  return out;
}

void OptimizerGroups::load_owned_state(const ReadRows& read) {
  for (auto& m : members_) m->load_owned_state(read);
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
