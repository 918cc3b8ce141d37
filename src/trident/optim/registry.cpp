// The registered optimizers, one entry each (optim/registry.h); an entry's
// rule calls its fused kernel through ops/optimizer.h.
#include "trident/optim/registry.h"

#include <algorithm>
#include <cctype>

#include "trident/ops/optimizer.h"

namespace trident::optim {

namespace {

// AdamW (torch.optim.AdamW): decoupled weight decay on the parameters that take it. Two groups (with
// and without weight decay), each one multi-tensor step: a single kernel launch per group on a GPU.
OptimizerDef adamw() {
  OptimizerDef d;
  d.name = AdamWOptions::kName;
  d.title = "AdamW";
  d.states = {{"exp_avg"}, {"exp_avg_sq"}};
  d.keys = {"betas", "eps", "weight_decay", "bias_correction"};
  d.deepspeed_types = {"Adam", "AdamW"};
  d.writes_compute_copy = true;
  d.from_settings = [](const Settings& s) -> Method {
    // bias_correction is optional in the settings (on unless given as 0).
    const bool correct = !s.contains("bias_correction") || setting(s, "bias_correction") != 0;
    return AdamWOptions{setting(s, "betas", 0), setting(s, "betas", 1), setting(s, "eps"), setting(s, "weight_decay"),
                        correct};
  };
  d.step = [](const Method& m, std::span<const ParamUpdate> updates, const StepArgs& a) {
    const auto& o = m.options<AdamWOptions>();
    std::vector<ops::AdamWTensors> decayed, plain;
    for (const ParamUpdate& u : updates) {
      (u.param->weight_decay ? decayed : plain)
          .push_back({u.data, u.grad, &u.state[0], &u.state[1], u.compute_copy});
    }
    ops::adamw_step_multi(decayed, ops::AdamWConfig{a.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.bias_correction},
                          a.step, a.grad_scale);
    ops::adamw_step_multi(plain, ops::AdamWConfig{a.lr, o.beta1, o.beta2, o.eps, 0.0, o.bias_correction}, a.step,
                          a.grad_scale);
  };
  return d;
}

// SGD with momentum (torch.optim.SGD, no dampening): the momentum starts at the first step's gradient.
OptimizerDef sgd() {
  OptimizerDef d;
  d.name = SGDOptions::kName;
  d.title = "SGD";
  d.states = {{"momentum"}};
  d.keys = {"momentum", "weight_decay"};
  d.from_settings = [](const Settings& s) -> Method {
    return SGDOptions{setting(s, "momentum"), setting(s, "weight_decay"), false};
  };
  d.step = [](const Method& m, std::span<const ParamUpdate> updates, const StepArgs& a) {
    const auto& o = m.options<SGDOptions>();
    for (const ParamUpdate& u : updates) {
      ops::sgd_step(*u.data, *u.grad, u.state[0], a.lr, o.momentum, u.param->weight_decay ? o.weight_decay : 0.0,
                    0.0, o.nesterov, a.grad_scale, a.fresh);
    }
  };
  return d;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// "a", "a or b", "a, b or c".
std::string either(const std::vector<std::string>& words, const char* last) {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? last : ", ";
    out += words[i];
  }
  return out;
}

}  // namespace

const std::vector<OptimizerDef>& optimizers() {
  static const std::vector<OptimizerDef> all = {adamw(), sgd()};
  return all;
}

std::size_t OptimizerDef::state_bytes(DType master) const {
  std::size_t bytes = 0;
  for (const StateSpec& s : states) bytes += dtype_size(s.dtype_for(master));
  return bytes;
}

void Method::check_type(const std::type_info& wanted) const {
  TRIDENT_CHECK(*type_ == wanted, "optimizer '{}': its hyperparameters are {}, not {}", def_->name, type_->name(),
                wanted.name());
}

void check_update(const OptimizerDef& def, const ParamUpdate& u) {
  TRIDENT_CHECK(u.param && u.data && u.grad && u.data->defined() && u.grad->defined(),
                "{}: an update needs its parameter, weights and gradient", def.name);
  const Tensor& w = *u.data;
  TRIDENT_CHECK(w.dtype() == DType::f32 || w.dtype() == DType::f64,
                "{}: '{}' has dtype {}, expected f32 or f64 master weights", def.name, u.param->name, w.dtype());
  const auto like_weights = [&](const Tensor& t, std::string_view what) {
    TRIDENT_CHECK(t.defined() && t.numel() == w.numel() && t.device() == w.device(),
                  "{}: the {} of '{}' must hold its {} elements on {}", def.name, what,
                  u.param->name, w.numel(), w.device());
  };
  like_weights(*u.grad, "gradient");
  TRIDENT_CHECK(is_floating(u.grad->dtype()), "{}: the gradient of '{}' has dtype {}", def.name, u.param->name,
                u.grad->dtype());
  TRIDENT_CHECK(u.state.size() == def.states.size(), "{}: '{}' has {} state tensors, expected {}", def.name,
                u.param->name, u.state.size(), def.states.size());
  for (std::size_t k = 0; k < def.states.size(); ++k) {
    like_weights(u.state[k], def.states[k].name);
    TRIDENT_CHECK(u.state[k].dtype() == def.states[k].dtype_for(w.dtype()), "{}: {} of '{}' has dtype {}, expected {}",
                  def.name, def.states[k].name, u.param->name, u.state[k].dtype(), def.states[k].dtype_for(w.dtype()));
  }
}

const OptimizerDef* find_optimizer(std::string_view name) {
  for (const OptimizerDef& d : optimizers())
    if (d.name == name) return &d;
  return nullptr;
}

const OptimizerDef& optimizer_def(std::string_view name) {
  if (const OptimizerDef* d = find_optimizer(name)) return *d;
  std::vector<std::string> names;
  for (const OptimizerDef& d : optimizers()) names.push_back(d.name);
  TRIDENT_FAIL("optim.name must be {}, got '{}'", either(names, " or "), name);
}

const OptimizerDef* find_deepspeed_optimizer(std::string_view type) {
  for (const OptimizerDef& d : optimizers()) {
    for (const std::string& t : d.deepspeed_types)
      if (lower(t) == lower(type)) return &d;
  }
  return nullptr;
}

std::string deepspeed_optimizers_note() {
  std::vector<std::string> parts;
  for (const OptimizerDef& d : optimizers()) {
    if (d.deepspeed_types.empty()) continue;
    const bool one = d.deepspeed_types.size() == 1;
    parts.push_back(fmt::format("{} (DeepSpeed's {} map{} onto it)", d.title, either(d.deepspeed_types, " and "),
                                one ? "s" : ""));
  }
  return fmt::format("trident's optimizer{} {}", parts.size() == 1 ? " is" : "s are", either(parts, " and "));
}

Method method_from_settings(std::string_view name, const Settings& settings) {
  return optimizer_def(name).from_settings(settings);
}

double setting(const Settings& settings, std::string_view key, std::size_t index) {
  auto it = settings.find(key);
  TRIDENT_CHECK(it != settings.end(), "optimizer: no value for optim.{}", key);
  TRIDENT_CHECK(index < it->second.size(), "optim.{} must hold {} numbers, got {}", key, index + 1,
                it->second.size());
  return it->second[index];
}

}  // namespace trident::optim
