#include "trident/train/config/deepspeed_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "trident/core/error.h"
#include "trident/core/text.h"
#include "trident/optim/registry.h"

// The key semantics followed here (defaults, the batch rule, what Adam means,
// the schedulers' shapes) are written down in docs/deepspeed.md.
namespace trident::train {

namespace {

using json = nlohmann::ordered_json;

// The nearest of `known` to `key` when it is a likely typo ("" otherwise).
std::string nearest(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_d = std::string::npos;
  for (const std::string& k : known) {
    const std::size_t d = edit_distance(key, k);
    const bool close = d <= std::max<std::size_t>(2, k.size() / 5) ||
                       (key.size() >= 6 && (k.find(key) != std::string::npos || key.find(k) != std::string::npos));
    if (close && d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

std::string show(const json& v) { return v.dump(); }

bool is_auto(const json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

// A TOML float's text for a double (set_key parses it).
std::string toml_float(double v) {
  std::string text = fmt::format("{}", v);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

class Mapper {
 public:
  Mapper(Config& config, std::string origin, std::int64_t dp) : c_(config), origin_(std::move(origin)), dp_(dp) {}

  std::vector<std::string> run(const json& root) {
    TRIDENT_CHECK(root.is_object(), "{}: expected a JSON object at the top (DeepSpeed's config), got {}", origin_,
                  show(root).substr(0, 60));
    // The batch triple is one rule over three keys; the optimizer goes before the scheduler, whose
    // WarmupCosineLR scales the optimizer's lr.
    map_batch(root);
    const auto enabled = [&](const char* k) {
      return root.contains(k) && root.at(k).is_object() && root.at(k).contains("enabled") &&
             root.at(k).at("enabled") == true;
    };
    if (enabled("fp16") && (enabled("bf16") || enabled("bfloat16"))) {
      fail("fp16.enabled and bf16.enabled are both true: one precision, as DeepSpeed requires");
    }
    if (root.contains("optimizer")) map_optimizer(root.at("optimizer"));
    for (const auto& [key, value] : root.items()) {
      if (key == "train_batch_size" || key == "train_micro_batch_size_per_gpu" ||
          key == "gradient_accumulation_steps" || key == "optimizer") {
        continue;
      }
      map_top(key, value);
    }
    if (!root.contains("gradient_clipping")) {
      note("gradient_clipping absent: optim.clip_grad stays {} (DeepSpeed without it does not clip)",
           key_value(c_, "optim.clip_grad"));
    }
    return std::move(lines_);
  }

 private:
  Config& c_;
  std::string origin_;
  std::int64_t dp_;
  std::vector<std::string> lines_;

  template <typename... A>
  void note(fmt::format_string<A...> f, A&&... a) {
    lines_.push_back(origin_ + ": " + fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) {
    TRIDENT_FAIL("{}: {}", origin_, fmt::format(f, std::forward<A>(a)...));
  }

  // Sets trident `key` from DeepSpeed `ds_key` (whose value the line shows as `shown`).
  void set(const std::string& ds_key, const std::string& shown, const std::string& key, const std::string& toml,
           const std::string& why = "") {
    set_key(c_, key, toml, origin_ + ": " + ds_key);
    note("{} {} → {} = {}{}", ds_key, shown, key, key_value(c_, key), why);
  }
  void keep(const std::string& ds_key, const std::string& key) {
    note("{} \"auto\" → {} stays {}", ds_key, key, key_value(c_, key));
  }
  void ignored(const std::string& ds_key, const json& v, const std::string& why) {
    note("{} {} ignored ({})", ds_key, show(v), why);
  }

  double number(const std::string& k, const json& v) {
    if (!v.is_number()) fail("{} must be a number, got {}", k, show(v));
    return v.get<double>();
  }
  std::int64_t integer(const std::string& k, const json& v) {
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9e15) return static_cast<std::int64_t>(d);
    }
    fail("{} must be an integer, got {}", k, show(v));
  }
  bool boolean(const std::string& k, const json& v) {
    if (!v.is_boolean()) fail("{} must be true or false, got {}", k, show(v));
    return v.get<bool>();
  }
  std::string string(const std::string& k, const json& v) {
    if (!v.is_string()) fail("{} must be a string, got {}", k, show(v));
    return v.get<std::string>();
  }
  const json& object(const std::string& k, const json& v) {
    if (!v.is_object()) fail("{} must be an object ({{...}}), got {}", k, show(v));
    return v;
  }
  [[noreturn]] void unknown_in(const std::string& section, const std::string& key,
                               const std::vector<std::string>& known) {
    const std::string near = nearest(key, known);
    if (!near.empty()) fail("unknown key {}.{} (did you mean {}.{}?)", section, key, section, near);
    fail("unknown key {}.{} (known: {})", section, key, fmt::join(known, ", "));
  }

  // --- train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps ---------------
  std::optional<std::int64_t> batch_key(const json& root, const char* k) {
    if (!root.contains(k) || root.at(k).is_null() || is_auto(root.at(k))) return std::nullopt;
    const std::int64_t v = integer(k, root.at(k));
    if (v <= 0) fail("{} must be a positive integer, got {}", k, v);
    // Bounded so that micro × accumulation × data-parallel size cannot wrap around.
    if (v > (std::int64_t{1} << 40)) fail("{} {} is more than any batch trident runs (2^40 samples)", k, v);
    return v;
  }
  void map_batch(const json& root) {
    const auto train = batch_key(root, "train_batch_size");
    const auto micro = batch_key(root, "train_micro_batch_size_per_gpu");
    const auto accum = batch_key(root, "gradient_accumulation_steps");
    for (const char* k : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}) {
      if (root.contains(k) && is_auto(root.at(k))) note("{} \"auto\": taken as unset", k);
    }
    if (!train && !micro) {
      if (accum) {
        fail("gradient_accumulation_steps {} alone does not fix the batch: give train_batch_size or "
             "train_micro_batch_size_per_gpu too",
             *accum);
      }
      note("no batch size given: train.micro_batch_size stays {}, train.global_batch_size stays {}",
           key_value(c_, "train.micro_batch_size"), key_value(c_, "train.global_batch_size"));
      return;
    }
    // DeepSpeed's rule: any two give the third (rounding down), one alone means no accumulation; then
    // train = micro × accum × data-parallel size must hold exactly.
    std::int64_t t = 0, m = 0, a = 0;
    std::string derived;
    if (train && micro && accum) {
      t = *train, m = *micro, a = *accum;
    } else if (train && micro) {
      t = *train, m = *micro, a = t / m / dp_;
      derived = fmt::format("gradient_accumulation_steps derived as {} / {} / {}, rounded down", t, m, dp_);
    } else if (train && accum) {
      t = *train, a = *accum, m = t / dp_ / a;
      derived = fmt::format("train_micro_batch_size_per_gpu derived as {} / {} / {}, rounded down", t, dp_, a);
    } else if (micro && accum) {
      m = *micro, a = *accum, t = m * a * dp_;
    } else if (train) {
      t = *train, a = 1, m = t / dp_;
      derived = fmt::format("train_micro_batch_size_per_gpu derived as {} / {}, rounded down", t, dp_);
    } else {
      m = *micro, a = 1, t = m * dp_;
    }
    if (m * a * dp_ != t || m <= 0 || a <= 0) {
      fail("train_batch_size {} != train_micro_batch_size_per_gpu {} × gradient_accumulation_steps {} × {} "
           "data-parallel rank{} = {}{}; DeepSpeed requires them equal",
           t, m, a, dp_, dp_ == 1 ? "" : "s", m * a * dp_, derived.empty() ? "" : " (" + derived + ")");
    }
    const auto shown = [&](const std::optional<std::int64_t>& given, std::int64_t v) {
      return given ? fmt::format("{}", v) : fmt::format("(derived) {}", v);
    };
    set("train_batch_size", shown(train, t), "train.global_batch_size", fmt::format("{}", t));
    set("train_micro_batch_size_per_gpu", shown(micro, m), "train.micro_batch_size", fmt::format("{}", m));
    note("gradient_accumulation_steps {} → {} micro-batches per step (= train.global_batch_size / "
         "(train.micro_batch_size × {} data-parallel rank{}))",
         shown(accum, a), a, dp_, dp_ == 1 ? "" : "s");
  }

  // --- optimizer -------------------------------------------------------------------------------------
  void map_optimizer(const json& section) {
    if (section.is_null()) return;
    object("optimizer", section);
    for (const auto& [k, v] : section.items()) {
      if (k != "type" && k != "params" && k != "legacy_fusion") unknown_in("optimizer", k, {"type", "params"});
      if (k == "legacy_fusion") ignored("optimizer.legacy_fusion", v, "a fused-kernel choice of DeepSpeed's");
    }
    if (!section.contains("type")) fail("optimizer has no \"type\" (expected Adam or AdamW)");
    const std::string type = string("optimizer.type", section.at("type"));
    std::string lower = type;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
    const optim::OptimizerDef* def = optim::find_deepspeed_optimizer(type);
    if (def == nullptr) fail("optimizer.type \"{}\" is not built: {}", type, optim::deepspeed_optimizers_note());
    set("optimizer.type", show(section.at("type")), "optim.name", fmt::format("\"{}\"", def->name));
    const json params = section.contains("params") ? object("optimizer.params", section.at("params")) : json::object();
    static const std::vector<std::string> known = {"lr",         "betas",          "eps",      "weight_decay",
                                                   "adam_w_mode", "bias_correction", "amsgrad", "torch_adam",
                                                   "set_grad_none", "max_grad_norm"};
    for (const auto& [k, v] : params.items()) {
      if (std::find(known.begin(), known.end(), k) == known.end()) unknown_in("optimizer.params", k, known);
    }
    // Unset params are DeepSpeed's (FusedAdam's) defaults, not trident's: the run is the one the file describes.
    const auto param = [&](const char* k, const char* trident_key, const std::function<std::string(const json&)>& to,
                           const json& ds_default) {
      const std::string dk = std::string("optimizer.params.") + k;
      if (!params.contains(k)) {
        set(dk, "(absent)", trident_key, to(ds_default), fmt::format(" (DeepSpeed's default {})", show(ds_default)));
      } else if (is_auto(params.at(k))) {
        keep(dk, trident_key);
      } else {
        set(dk, show(params.at(k)), trident_key, to(params.at(k)));
      }
    };
    param("lr", "optim.lr", [&](const json& v) { return toml_float(number("optimizer.params.lr", v)); }, json(1e-3));
    param(
        "betas", "optim.betas",
        [&](const json& v) {
          if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number()) {
            fail("optimizer.params.betas must be two numbers [beta1, beta2], got {}", show(v));
          }
          return fmt::format("[{}, {}]", toml_float(v[0].get<double>()), toml_float(v[1].get<double>()));
        },
        json::array({0.9, 0.999}));
    param("eps", "optim.eps", [&](const json& v) { return toml_float(number("optimizer.params.eps", v)); }, json(1e-8));
    param(
        "weight_decay", "optim.weight_decay",
        [&](const json& v) { return toml_float(number("optimizer.params.weight_decay", v)); }, json(0.0));
    // DeepSpeed's "Adam" decouples weight decay (AdamW) unless adam_w_mode is false; "AdamW" always does.
    const bool w_mode = params.contains("adam_w_mode") ? boolean("optimizer.params.adam_w_mode", params.at("adam_w_mode"))
                                                       : true;
    if (params.contains("adam_w_mode")) {
      note("optimizer.params.adam_w_mode {} → {}", show(params.at("adam_w_mode")),
           lower == "adamw" || w_mode ? "decoupled weight decay (trident's AdamW)" : "Adam with L2 weight decay");
    }
    if (lower == "adam" && !w_mode && c_.optim.weight_decay > 0) {
      fail("optimizer.params.adam_w_mode false with weight_decay {} is Adam with L2 regularization, which is not "
           "built (trident's AdamW decouples weight decay): set adam_w_mode true or weight_decay 0",
           key_value(c_, "optim.weight_decay"));
    }
    if (params.contains("bias_correction") && !boolean("optimizer.params.bias_correction", params.at("bias_correction"))) {
      fail("optimizer.params.bias_correction false is not built (trident's AdamW always corrects the bias)");
    }
    if (params.contains("bias_correction")) ignored("optimizer.params.bias_correction", params.at("bias_correction"), "trident's AdamW corrects the bias");
    if (params.contains("amsgrad") && boolean("optimizer.params.amsgrad", params.at("amsgrad"))) {
      fail("optimizer.params.amsgrad true is not built (trident's AdamW has no AMSGrad variant)");
    }
    if (params.contains("amsgrad")) ignored("optimizer.params.amsgrad", params.at("amsgrad"), "off, as trident's AdamW");
    if (params.contains("max_grad_norm")) {
      fail("optimizer.params.max_grad_norm is refused by DeepSpeed too: use the top-level gradient_clipping");
    }
    for (const char* k : {"torch_adam", "set_grad_none"}) {
      if (params.contains(k)) ignored(std::string("optimizer.params.") + k, params.at(k), "an implementation choice; the update is the same");
    }
  }

  // --- scheduler -------------------------------------------------------------------------------------
  void map_scheduler(const json& section) {
    if (section.is_null()) return;
    object("scheduler", section);
    for (const auto& [k, v] : section.items()) {
      if (k != "type" && k != "params") unknown_in("scheduler", k, {"type", "params"});
    }
    if (!section.contains("type")) fail("scheduler has no \"type\" (expected WarmupLR, WarmupDecayLR or WarmupCosineLR)");
    const std::string type = string("scheduler.type", section.at("type"));
    if (type == "OneCycle") {
      fail("scheduler.type \"OneCycle\" is not built: DeepSpeed's cycle (linear up over cycle_first_step_size, "
           "linear down, then cycle_min_lr / (1 + decay_lr_rate · t), with momentum cycled) is not the shape of "
           "trident's schedule.decay = \"one_cycle\"");
    }
    if (type != "WarmupLR" && type != "WarmupDecayLR" && type != "WarmupCosineLR") {
      fail("scheduler.type \"{}\" is not built (expected WarmupLR, WarmupDecayLR or WarmupCosineLR)", type);
    }
    const json params = section.contains("params") ? object("scheduler.params", section.at("params")) : json::object();
    std::vector<std::string> known = {"warmup_num_steps", "warmup_type", "last_batch_iteration"};
    if (type == "WarmupCosineLR") {
      known.insert(known.end(), {"total_num_steps", "warmup_min_ratio", "cos_min_ratio"});
    } else {
      known.insert(known.end(), {"warmup_min_lr", "warmup_max_lr"});
      if (type == "WarmupDecayLR") known.push_back("total_num_steps");
    }
    for (const auto& [k, v] : params.items()) {
      if (std::find(known.begin(), known.end(), k) == known.end()) unknown_in("scheduler.params", k, known);
    }
    const auto given = [&](const char* k) { return params.contains(k) && !is_auto(params.at(k)); };
    const auto p = [&](const char* k) { return std::string("scheduler.params.") + k; };
    note("scheduler.type \"{}\" → schedule.decay = \"{}\"", type,
         type == "WarmupLR" ? "constant" : type == "WarmupDecayLR" ? "linear" : "cosine");
    set_key(c_, "schedule.decay",
            type == "WarmupLR" ? "\"constant\"" : type == "WarmupDecayLR" ? "\"linear\"" : "\"cosine\"",
            origin_ + ": scheduler.type");
    // warmup_type: DeepSpeed's default is log; trident warms up linearly only.
    const std::string wtype = given("warmup_type") ? string(p("warmup_type"), params.at("warmup_type")) : "log";
    if (wtype != "linear") {
      fail("scheduler.params.warmup_type \"{}\"{} is not built: trident's warmup is linear (set \"warmup_type\": "
           "\"linear\")",
           wtype, given("warmup_type") ? "" : " (DeepSpeed's default, as the key is absent)");
    }
    note("scheduler.params.warmup_type \"linear\" → trident's linear warmup");
    if (params.contains("last_batch_iteration") && integer(p("last_batch_iteration"), params.at("last_batch_iteration")) != -1) {
      fail("scheduler.params.last_batch_iteration {} is not built (a run starts at step 0; resume from a checkpoint)",
           show(params.at("last_batch_iteration")));
    }
    if (given("warmup_num_steps")) {
      const std::int64_t w = integer(p("warmup_num_steps"), params.at("warmup_num_steps"));
      if (w < 0) fail("scheduler.params.warmup_num_steps must be 0 or more, got {}", w);
      set(p("warmup_num_steps"), show(params.at("warmup_num_steps")), "schedule.warmup_steps", fmt::format("{}", w));
    } else if (params.contains("warmup_num_steps")) {
      keep(p("warmup_num_steps"), "schedule.warmup_steps");
    } else {
      set(p("warmup_num_steps"), "(absent)", "schedule.warmup_steps", "1000", " (DeepSpeed's default 1000)");
    }
    if (type == "WarmupCosineLR") {
      if (given("warmup_min_ratio") && number(p("warmup_min_ratio"), params.at("warmup_min_ratio")) != 0) {
        fail("scheduler.params.warmup_min_ratio {} is not built: trident's warmup starts from 0",
             show(params.at("warmup_min_ratio")));
      }
      const double ratio = given("cos_min_ratio") ? number(p("cos_min_ratio"), params.at("cos_min_ratio")) : 1e-4;
      set(p("cos_min_ratio"), given("cos_min_ratio") ? show(params.at("cos_min_ratio")) : "(absent: 0.0001)",
          "schedule.min_lr", toml_float(ratio * c_.optim.lr),
          fmt::format(" (× optim.lr {})", key_value(c_, "optim.lr")));
    } else {
      if (given("warmup_min_lr") && number(p("warmup_min_lr"), params.at("warmup_min_lr")) != 0) {
        fail("scheduler.params.warmup_min_lr {} is not built: trident's warmup starts from 0",
             show(params.at("warmup_min_lr")));
      }
      if (given("warmup_max_lr")) {
        set(p("warmup_max_lr"), show(params.at("warmup_max_lr")), "optim.lr",
            toml_float(number(p("warmup_max_lr"), params.at("warmup_max_lr"))));
      } else if (params.contains("warmup_max_lr")) {
        keep(p("warmup_max_lr"), "optim.lr");
      } else {
        set(p("warmup_max_lr"), "(absent)", "optim.lr", "0.001", " (DeepSpeed's default 0.001)");
      }
      if (type == "WarmupDecayLR") set_key(c_, "schedule.min_lr", "0.0", origin_ + ": scheduler.type");
    }
    if (type != "WarmupLR") {
      if (given("total_num_steps")) {
        const std::int64_t total = integer(p("total_num_steps"), params.at("total_num_steps"));
        if (total <= 0) fail("scheduler.params.total_num_steps must be positive, got {}", total);
        set(p("total_num_steps"), show(params.at("total_num_steps")), "schedule.decay_steps", fmt::format("{}", total));
      } else if (params.contains("total_num_steps")) {
        keep(p("total_num_steps"), "schedule.decay_steps");
      } else {
        fail("scheduler.params.total_num_steps is required by {}", type);
      }
    }
  }

  // --- fp16, bf16 ------------------------------------------------------------------------------------
  void map_fp16(const json& section) {
    object("fp16", section);
    static const std::vector<std::string> known = {
        "enabled",    "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
        "consecutive_hysteresis", "min_loss_scale", "auto_cast", "fp16_master_weights_and_grads"};
    for (const auto& [k, v] : section.items()) {
      if (std::find(known.begin(), known.end(), k) == known.end()) unknown_in("fp16", k, known);
    }
    if (!section.contains("enabled") || is_auto(section.at("enabled"))) {
      note("fp16.enabled {}: train.precision stays {}", section.contains("enabled") ? "\"auto\"" : "absent (false)",
           key_value(c_, "train.precision"));
      if (!section.contains("enabled")) return;
    } else if (!boolean("fp16.enabled", section.at("enabled"))) {
      note("fp16.enabled false: the section's other keys do not apply");
      return;
    } else {
      set("fp16.enabled", "true", "train.precision", "\"fp16\"");
    }
    const auto given = [&](const char* k) { return section.contains(k) && !is_auto(section.at(k)); };
    if (given("loss_scale") && number("fp16.loss_scale", section.at("loss_scale")) != 0) {
      fail("fp16.loss_scale {} (a static scale) is not built: trident's loss scale is dynamic (fp16.loss_scale 0)",
           show(section.at("loss_scale")));
    }
    if (section.contains("loss_scale")) note("fp16.loss_scale {} → a dynamic loss scale", show(section.at("loss_scale")));
    const auto opt = [&](const char* k, const char* key, const json& dflt, const std::function<std::string(const json&)>& to) {
      const std::string dk = std::string("fp16.") + k;
      if (!section.contains(k)) {
        set(dk, "(absent)", key, to(dflt), fmt::format(" (DeepSpeed's default {})", show(dflt)));
      } else if (is_auto(section.at(k))) {
        keep(dk, key);
      } else {
        set(dk, show(section.at(k)), key, to(section.at(k)));
      }
    };
    opt("initial_scale_power", "optim.initial_loss_scale", json(16), [&](const json& v) {
      const std::int64_t power = integer("fp16.initial_scale_power", v);
      if (power < 0 || power > 1000) fail("fp16.initial_scale_power must be in [0, 1000], got {}", power);
      return toml_float(std::ldexp(1.0, static_cast<int>(power)));
    });
    opt("loss_scale_window", "optim.loss_scale_window", json(1000),
        [&](const json& v) { return fmt::format("{}", integer("fp16.loss_scale_window", v)); });
    opt("hysteresis", "optim.loss_scale_hysteresis", json(2),
        [&](const json& v) { return fmt::format("{}", integer("fp16.hysteresis", v)); });
    opt("min_loss_scale", "optim.min_loss_scale", json(1),
        [&](const json& v) { return toml_float(number("fp16.min_loss_scale", v)); });
    if (given("consecutive_hysteresis") && boolean("fp16.consecutive_hysteresis", section.at("consecutive_hysteresis")) &&
        c_.optim.loss_scale_hysteresis > 1) {
      fail("fp16.consecutive_hysteresis true is not built: trident restores the hysteresis when the scale grows, "
           "not after every good step");
    }
    if (section.contains("consecutive_hysteresis")) ignored("fp16.consecutive_hysteresis", section.at("consecutive_hysteresis"), "no effect with this hysteresis");
    if (given("fp16_master_weights_and_grads") &&
        boolean("fp16.fp16_master_weights_and_grads", section.at("fp16_master_weights_and_grads"))) {
      fail("fp16.fp16_master_weights_and_grads true is not built: trident keeps fp32 master weights and gradients");
    }
    if (section.contains("fp16_master_weights_and_grads")) ignored("fp16.fp16_master_weights_and_grads", section.at("fp16_master_weights_and_grads"), "fp32 master weights, as trident's");
    if (section.contains("auto_cast")) ignored("fp16.auto_cast", section.at("auto_cast"), "trident casts inside the forward pass");
  }

  void map_bf16(const std::string& name, const json& section) {
    object(name, section);
    for (const auto& [k, v] : section.items()) {
      if (k == "enabled") continue;
      if (k == "immediate_grad_update" || k == "check_grad_overflow") {
        ignored(name + "." + k, v, "how DeepSpeed's bf16 optimizer schedules its work");
        continue;
      }
      unknown_in(name, k, {"enabled", "immediate_grad_update"});
    }
    if (!section.contains("enabled") || is_auto(section.at("enabled"))) {
      note("{}.enabled {}: train.precision stays {}", name, section.contains("enabled") ? "\"auto\"" : "absent (false)",
           key_value(c_, "train.precision"));
      return;
    }
    if (!boolean(name + ".enabled", section.at("enabled"))) {
      note("{}.enabled false", name);
      return;
    }
    set(name + ".enabled", "true", "train.precision", "\"bf16\"");
  }

  // --- zero_optimization -----------------------------------------------------------------------------
  void map_zero(const json& section) {
    if (section.is_boolean()) {  // DeepSpeed's old form: true = stage 1
      set("zero_optimization", show(section), "dist.zero_stage", section.get<bool>() ? "1" : "0");
      return;
    }
    object("zero_optimization", section);
    static const std::set<std::string> tuning = {
        "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "use_multi_rank_bucket_allreduce",
        "allgather_partitions", "allgather_bucket_size", "overlap_comm", "load_from_fp32_weights",
        "elastic_checkpoint", "sub_group_size", "cpu_offload_use_pin_memory", "stage3_prefetch_bucket_size",
        "prefetch_bucket_size", "stage3_param_persistence_threshold", "param_persistence_threshold",
        "stage3_model_persistence_threshold", "model_persistence_threshold", "stage3_max_live_parameters",
        "max_live_parameters", "stage3_max_reuse_distance", "max_reuse_distance",
        "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save", "stage3_module_granularity_threshold",
        "module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params",
        "ignore_unused_parameters", "legacy_stage1", "round_robin_gradients", "memory_efficient_linear",
        "pipeline_loading_checkpoint", "override_module_apply", "log_trace_cache_warnings"};
    // Keys that change what is computed or where state lives, when not at their "off" value.
    static const std::set<std::string> refused_if_on = {
        "cpu_offload", "cpu_offload_param", "cpu_offload_params", "zero_quantized_weights",
        "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "zeropp_loco_param",
        "mics_hierarchical_params_gather"};
    std::vector<std::string> known(tuning.begin(), tuning.end());
    known.insert(known.end(), refused_if_on.begin(), refused_if_on.end());
    known.insert(known.end(), {"stage", "offload_optimizer", "offload_param", "zero_hpz_partition_size", "mics_shard_size"});
    for (const auto& [k, v] : section.items()) {
      const std::string dk = "zero_optimization." + k;
      if (k == "stage") {
        if (is_auto(v)) {
          keep(dk, "dist.zero_stage");
          continue;
        }
        const std::int64_t stage = integer(dk, v);
        if (stage < 0 || stage > 3) fail("{} must be 0, 1, 2 or 3, got {}", dk, stage);
        set(dk, show(v), "dist.zero_stage", fmt::format("{}", stage));
      } else if (tuning.count(k)) {
        ignored(dk, v, "tunes DeepSpeed's buffers and communication, not what is computed");
      } else if (k == "offload_optimizer" || k == "offload_param") {
        const bool none = v.is_null() || (v.is_object() && (!v.contains("device") || v.at("device") == "none"));
        if (!none) fail("{} {} is not built: trident keeps {} on the training device", dk, show(v),
                        k == "offload_optimizer" ? "the optimizer state" : "the parameters");
        ignored(dk, v, "device none");
      } else if (refused_if_on.count(k)) {
        if (v.is_boolean() && !v.get<bool>()) {
          ignored(dk, v, "off");
        } else {
          fail("{} {} is not built by trident's ZeRO", dk, show(v));
        }
      } else if (k == "zero_hpz_partition_size" || k == "mics_shard_size") {
        const bool off = v.is_number() && (k == "mics_shard_size" ? v.get<double>() <= 0 : v.get<double>() <= 1);
        if (!off) fail("{} {} is not built: trident's ZeRO partitions over the whole data-parallel group", dk, show(v));
        ignored(dk, v, "off");
      } else {
        unknown_in("zero_optimization", k, known);
      }
    }
    if (!section.contains("stage")) set("zero_optimization.stage", "(absent)", "dist.zero_stage", "0", " (DeepSpeed's default 0)");
  }

  void map_activation_checkpointing(const json& section) {
    object("activation_checkpointing", section);
    static const std::vector<std::string> known = {"partition_activations", "contiguous_memory_optimization",
                                                   "cpu_checkpointing", "number_checkpoints",
                                                   "synchronize_checkpoint_boundary", "profile"};
    for (const auto& [k, v] : section.items()) {
      const std::string dk = "activation_checkpointing." + k;
      if (std::find(known.begin(), known.end(), k) == known.end()) unknown_in("activation_checkpointing", k, known);
      if (k == "cpu_checkpointing" && boolean(dk, v)) {
        fail("{} true is not built: trident keeps checkpointed activations on the training device", dk);
      }
      ignored(dk, v, "how DeepSpeed stores checkpointed activations; trident's recomputation is train.activation_checkpointing");
    }
  }

  // DeepSpeed's TensorBoard monitor: enabled, it logs the loss and learning rate into output_path/job_name
  // (output_path relative to the working directory), which is what log.tensorboard writes (and more).
  void map_tensorboard(const json& section) {
    object("tensorboard", section);
    for (const auto& [k, v] : section.items()) {
      if (k != "enabled" && k != "output_path" && k != "job_name")
        unknown_in("tensorboard", k, {"enabled", "output_path", "job_name"});
    }
    if (!(section.contains("enabled") && boolean("tensorboard.enabled", section.at("enabled")))) {
      return ignored("tensorboard", section, "not enabled");
    }
    auto text = [&](const char* key, const std::string& fallback) {
      if (!section.contains(key) || section.at(key).is_null()) return fallback;
      if (!section.at(key).is_string()) fail("tensorboard.{} must be a string, got {}", key, show(section.at(key)));
      return section.at(key).get<std::string>();
    };
    const std::filesystem::path dir =
        std::filesystem::absolute(text("output_path", ".")) / text("job_name", "DeepSpeedJobName");
    set("tensorboard", show(section), "log.tensorboard", json(dir.lexically_normal().string()).dump(),
        " (trident's scalars, DeepSpeed's directory)");
  }

  // A section whose "enabled": true would change the run.
  void refuse_if_enabled(const std::string& k, const json& v, const std::string& what) {
    // These two have no "enabled": a section present is a request.
    const bool always = k == "sparse_attention" || k == "compression_training";
    const bool on = always ? !v.is_null()
                           : v.is_object() ? v.contains("enabled") && v.at("enabled") == true : !v.is_null() && v != false;
    if (on) fail("{} is enabled: {} is not built", k, what);
    ignored(k, v, "not enabled");
  }

  void map_top(const std::string& k, const json& v) {
    static const std::set<std::string> tuning = {
        "wall_clock_breakdown", "memory_breakdown", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
        "dump_state", "prescale_gradients", "gradient_predivide_factor", "communication_data_type",
        "seq_parallel_communication_data_type", "sparse_gradients", "disable_allgather", "dataloader_drop_last",
        "graph_harvesting", "use_data_before_expert_parallelism", "timers", "comms_logger", "wandb",
        "csv_monitor", "comet", "flops_profiler", "aio", "checkpoint", "autotuning", "nebula", "vocabulary_size",
        "pipeline", "zero_optimization_stage_3_fetch", "load_universal_checkpoint", "use_node_local_storage"};
    static const std::map<std::string, std::string> enabled_sections = {
        {"amp", "NVIDIA Apex AMP"},
        {"progressive_layer_drop", "progressive layer drop"},
        {"eigenvalue", "eigenvalue computation for the layer-wise schedule"},
        {"curriculum_learning", "curriculum learning"},
        {"data_efficiency", "DeepSpeed's data efficiency (curriculum, token dropping)"},
        {"hybrid_engine", "the hybrid engine"},
        {"elasticity", "elastic training (it changes the batch sizes)"},
        {"sparse_attention", "sparse attention"},
        {"compression_training", "compression training (quantization, pruning)"}};
    if (k == "zero_optimization") return map_zero(v);
    if (k == "scheduler") return map_scheduler(v);
    if (k == "fp16") return map_fp16(v);
    if (k == "bf16" || k == "bfloat16") return map_bf16(k, v);
    if (k == "activation_checkpointing") return map_activation_checkpointing(v);
    if (k == "tensorboard") return map_tensorboard(v);
    if (k == "gradient_clipping") {
      if (is_auto(v)) return keep(k, "optim.clip_grad");
      return set(k, show(v), "optim.clip_grad", toml_float(number(k, v)));
    }
    if (k == "steps_per_print") {
      if (is_auto(v) || v.is_null()) return keep(k, "train.log_interval");
      return set(k, show(v), "train.log_interval", fmt::format("{}", integer(k, v)));
    }
    if (k == "tensor_parallel") {
      const bool on = v.is_object() && v.contains("autotp_size") && v.at("autotp_size").is_number() &&
                      v.at("autotp_size").get<double>() > 1;
      if (on) fail("tensor_parallel.autotp_size {} is not built: use dist.tensor_parallel_size", show(v.at("autotp_size")));
      return ignored(k, v, "no tensor parallelism asked");
    }
    if (k == "sequence_parallel_size") {
      if (integer(k, v) > 1) fail("sequence_parallel_size {} (DeepSpeed-Ulysses) is not built", show(v));
      return ignored(k, v, "1");
    }
    if (k == "data_types") {
      object(k, v);
      for (const auto& [dk, dv] : v.items()) {
        if (dk != "grad_accum_dtype") unknown_in("data_types", dk, {"grad_accum_dtype"});
        if (!dv.is_null() && dv != "fp32") {
          fail("data_types.grad_accum_dtype {} is not built: trident accumulates gradients in fp32", show(dv));
        }
      }
      return ignored(k, v, "fp32 gradient accumulation, as trident's");
    }
    if (tuning.count(k)) return ignored(k, v, "tunes or reports on DeepSpeed's internals");
    if (auto it = enabled_sections.find(k); it != enabled_sections.end()) return refuse_if_enabled(k, v, it->second);
    // An unknown key close to a known one is surely a typo that would silently do nothing: an error. Any
    // other is left alone, as DeepSpeed leaves it, with a note.
    std::vector<std::string> known = {"train_batch_size", "train_micro_batch_size_per_gpu",
                                      "gradient_accumulation_steps", "optimizer", "scheduler", "zero_optimization",
                                      "fp16", "bf16", "gradient_clipping", "steps_per_print",
                                      "activation_checkpointing", "tensor_parallel", "sequence_parallel_size",
                                      "data_types", "tensorboard"};
    known.insert(known.end(), tuning.begin(), tuning.end());
    for (const auto& [name, what] : enabled_sections) known.push_back(name);
    const std::string near = nearest(k, known);
    if (!near.empty()) fail("unknown key {} (did you mean {}?)", k, near);
    note("{} ignored (not a DeepSpeed key trident knows)", k);
  }
};

}  // namespace

std::vector<std::string> apply_deepspeed_json(Config& config, const std::string& json_text, const std::string& origin,
                                              std::int64_t data_parallel_size) {
  json root;
  try {
    root = json::parse(json_text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {  // a syntax error, or a number out of range (1e400)
    std::string what = e.what();
    if (const auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    TRIDENT_FAIL("{}: invalid JSON: {}", origin, what);
  }
  return Mapper(config, origin, data_parallel_size).run(root);
}

std::vector<std::string> apply_deepspeed_file(Config& config, const std::string& path,
                                              std::int64_t data_parallel_size) {
  std::error_code ec;
  TRIDENT_CHECK(!std::filesystem::is_directory(path, ec),
                "train.deepspeed_config '{}': is a directory, not a DeepSpeed JSON config", path);
  std::ifstream in(path, std::ios::binary);
  TRIDENT_CHECK(in.good(), "train.deepspeed_config '{}': cannot read the file", path);
  std::stringstream text;
  text << in.rdbuf();
  TRIDENT_CHECK(!in.bad(), "train.deepspeed_config '{}': a read error", path);
  return apply_deepspeed_json(config, text.str(), path, data_parallel_size);
}

}  // namespace trident::train
