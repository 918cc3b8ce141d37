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
#include "trident/optim/schedule.h"
#include "trident/train/setup.h"

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
  Mapper(Config& config, std::string origin, std::int64_t dp, const std::set<std::string>& given)
      : c_(config), origin_(std::move(origin)), dp_(dp), given_(given) {}

  std::vector<std::string> run(const json& root) {
    TRIDENT_CHECK(root.is_object(), "{}: expected a JSON object at the top (DeepSpeed's config), got {}", origin_,
                  show(root).substr(0, 60));
    // DeepSpeed-Ulysses' sequence_parallel_size is context parallelism: its ranks are not data-parallel ones,
    // so the batch rule counts dp without them (unless the TOML file or a --set gave the context-parallel size,
    // which dp already counts).
    if (root.contains("sequence_parallel_size") && !given_in("dist.context_parallel_size")) {
      const std::int64_t sp = integer("sequence_parallel_size", root.at("sequence_parallel_size"));
      if (sp > 1) {
        if (sp > dp_ || dp_ % sp != 0)
          fail("sequence_parallel_size {} must divide the {} data-parallel rank{} of the job", sp, dp_,
               dp_ == 1 ? "" : "s");
        dp_ /= sp;
      }
    }
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
    zero_stage_ = zero_stage_of(root);
    fp32_accumulation_ = root.contains("data_types") && root.at("data_types").is_object() &&
                         root.at("data_types").value("grad_accum_dtype", json()) == "fp32";
    if (root.contains("optimizer")) map_optimizer(root.at("optimizer"));
    for (const auto& [key, value] : root.items()) {
      if (key == "train_batch_size" || key == "train_micro_batch_size_per_gpu" ||
          key == "gradient_accumulation_steps" || key == "optimizer") {
        continue;
      }
      map_top(key, value);
    }
    if (!root.contains("scheduler") || root.at("scheduler").is_null()) no_scheduler();
    if (!root.contains("gradient_clipping")) no_clipping();
    check_compute_grad_norm(root);
    if (!refused_.empty()) {
      TRIDENT_FAIL("{}: {} key{} cannot apply (nothing was run): {}", origin_, refused_.size(),
                   refused_.size() == 1 ? "" : "s", fmt::join(refused_, "; "));
    }
    return std::move(lines_);
  }

 private:
  Config& c_;
  std::string origin_;
  std::int64_t dp_;
  const std::set<std::string>& given_;  // the trident keys the TOML file or a --set gave
  std::int64_t zero_stage_ = 0;
  bool fp32_accumulation_ = false;  // data_types.grad_accum_dtype "fp32"
  std::vector<std::string> lines_;
  std::vector<std::string> refused_;  // every key that cannot apply, for one error at the end

  template <typename... A>
  void note(fmt::format_string<A...> f, A&&... a) {
    lines_.push_back(origin_ + ": " + fmt::format(f, std::forward<A>(a)...));
  }
  // A malformed value: the file is wrong, stop at once.
  template <typename... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) {
    TRIDENT_FAIL("{}: {}", origin_, fmt::format(f, std::forward<A>(a)...));
  }
  // A well-formed key that cannot apply (not built, or refused by DeepSpeed itself): collected, so that
  // the error lists every such key of the file.
  template <typename... A>
  void refuse(fmt::format_string<A...> f, A&&... a) {
    refused_.push_back(fmt::format(f, std::forward<A>(a)...));
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
  // True when the TOML file or a --set gave a key of trident's `section` (or the key `section` itself).
  bool given_in(const std::string& section) const {
    return std::any_of(given_.begin(), given_.end(), [&](const std::string& k) {
      return k == section || k.rfind(section + ".", 0) == 0;
    });
  }
  static std::int64_t zero_stage_of(const json& root) {
    if (!root.contains("zero_optimization")) return 0;
    const json& z = root.at("zero_optimization");
    if (z.is_boolean()) return z.get<bool>() ? 1 : 0;
    if (z.is_object() && z.contains("stage") && z.at("stage").is_number_integer()) return z.at("stage").get<std::int64_t>();
    return 0;
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
    if (def == nullptr) {
      return refuse("optimizer.type \"{}\" is not built ({})", type, optim::deepspeed_optimizers_note());
    }
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
      refuse("optimizer.params.adam_w_mode false with weight_decay {} (Adam with L2 regularization, which is not "
             "built: trident's AdamW decouples weight decay; set adam_w_mode true or weight_decay 0)",
             key_value(c_, "optim.weight_decay"));
    }
    // DeepSpeed's FusedAdam: bias_correction false divides by neither 1 − beta1^t nor √(1 − beta2^t).
    param(
        "bias_correction", "optim.bias_correction",
        [&](const json& v) { return boolean("optimizer.params.bias_correction", v) ? "true" : "false"; }, json(true));
    if (params.contains("amsgrad") && boolean("optimizer.params.amsgrad", params.at("amsgrad"))) {
      refuse("optimizer.params.amsgrad true (not built: trident's AdamW has no AMSGrad variant)");
    } else if (params.contains("amsgrad")) {
      ignored("optimizer.params.amsgrad", params.at("amsgrad"), "off, as trident's AdamW");
    }
    if (params.contains("max_grad_norm")) {
      refuse("optimizer.params.max_grad_norm (DeepSpeed refuses it too: use the top-level gradient_clipping)");
    }
    for (const char* k : {"torch_adam", "set_grad_none"}) {
      if (params.contains(k)) ignored(std::string("optimizer.params.") + k, params.at(k), "an implementation choice; the update is the same");
    }
  }

  // --- scheduler -------------------------------------------------------------------------------------
  // DeepSpeed builds its scheduler from the params as constructor arguments: an unknown one is its error,
  // an absent one the constructor's default (deepspeed/runtime/lr_schedules.py; docs/deepspeed.md).
  void map_scheduler(const json& section) {
    if (section.is_null()) return;
    object("scheduler", section);
    for (const auto& [k, v] : section.items()) {
      if (k != "type" && k != "params") unknown_in("scheduler", k, {"type", "params"});
    }
    if (!section.contains("type")) {
      fail("scheduler has no \"type\" (expected WarmupLR, WarmupDecayLR, WarmupCosineLR or OneCycle)");
    }
    const std::string type = string("scheduler.type", section.at("type"));
    static const std::map<std::string, std::string> decays = {{"WarmupLR", "deepspeed_warmup"},
                                                              {"WarmupDecayLR", "deepspeed_warmup_decay"},
                                                              {"WarmupCosineLR", "deepspeed_warmup_cosine"},
                                                              {"OneCycle", "deepspeed_one_cycle"},
                                                              {"LRRangeTest", "deepspeed_lr_range_test"}};
    const auto decay = decays.find(type);
    if (decay == decays.end()) {
      return refuse("scheduler.type \"{}\" (not built: trident builds DeepSpeed's WarmupLR, WarmupDecayLR, "
                    "WarmupCosineLR, OneCycle and LRRangeTest)",
                    type);
    }
    const json params = section.contains("params") ? object("scheduler.params", section.at("params")) : json::object();
    std::vector<std::string> known = {"last_batch_iteration"};
    if (type == "LRRangeTest") {
      known.insert(known.end(), {"lr_range_test_min_lr", "lr_range_test_step_size", "lr_range_test_step_rate",
                                 "lr_range_test_staircase"});
    } else if (type == "OneCycle") {
      known.insert(known.end(), {"cycle_min_lr", "cycle_max_lr", "decay_lr_rate", "cycle_first_step_size",
                                 "cycle_second_step_size", "cycle_first_stair_count", "cycle_second_stair_count",
                                 "decay_step_size", "cycle_momentum", "cycle_min_mom", "cycle_max_mom",
                                 "decay_mom_rate"});
    } else {
      known.insert(known.end(), {"warmup_num_steps", "warmup_type"});
      if (type == "WarmupCosineLR") {
        known.insert(known.end(), {"total_num_steps", "warmup_min_ratio", "cos_min_ratio"});
      } else {
        known.insert(known.end(), {"warmup_min_lr", "warmup_max_lr"});
        if (type == "WarmupDecayLR") known.push_back("total_num_steps");
      }
    }
    for (const auto& [k, v] : params.items()) {
      if (std::find(known.begin(), known.end(), k) == known.end()) unknown_in("scheduler.params", k, known);
    }
    set("scheduler.type", show(section.at("type")), "schedule.decay", json(decay->second).dump());
    if (params.contains("last_batch_iteration") && !is_auto(params.at("last_batch_iteration")) &&
        integer("scheduler.params.last_batch_iteration", params.at("last_batch_iteration")) != -1) {
      refuse("scheduler.params.last_batch_iteration {} (not built: a run starts at step 0; resume from a checkpoint)",
             show(params.at("last_batch_iteration")));
    }
    // One parameter: absent → DeepSpeed's default (`dflt`, or nothing when null), "auto" → trident's value.
    const auto param = [&](const char* k, const char* key, const json& dflt,
                           const std::function<std::string(const std::string&, const json&)>& to) {
      const std::string dk = std::string("scheduler.params.") + k;
      if (!params.contains(k)) {
        if (!dflt.is_null()) set(dk, "(absent)", key, to(dk, dflt), fmt::format(" (DeepSpeed's default {})", show(dflt)));
      } else if (is_auto(params.at(k))) {
        keep(dk, key);
      } else {
        set(dk, show(params.at(k)), key, to(dk, params.at(k)));
      }
    };
    const auto as_float = [&](const std::string& dk, const json& v) { return toml_float(number(dk, v)); };
    const auto as_int = [&](const std::string& dk, const json& v) { return fmt::format("{}", integer(dk, v)); };
    // A ratio of the optimizer's lr as the file resolves it (a later --set optim.lr moves the peak only).
    const auto ratio_of_lr = [&](const std::string& dk, const json& v) { return toml_float(number(dk, v) * c_.optim.lr); };
    if (type == "LRRangeTest") {
      param("lr_range_test_min_lr", "optim.lr", json(1e-3), as_float);
      param("lr_range_test_step_size", "schedule.lr_range_test_step_size", json(2000), as_int);
      param("lr_range_test_step_rate", "schedule.lr_range_test_step_rate", json(1.0), as_float);
      param("lr_range_test_staircase", "schedule.lr_range_test_staircase", json(false),
            [&](const std::string& dk, const json& v) { return boolean(dk, v) ? "true" : "false"; });
      return;
    }
    if (type == "OneCycle") {
      for (const char* k : {"cycle_min_lr", "cycle_max_lr"}) {  // OneCycle's required arguments
        if (!params.contains(k)) refuse("scheduler.params.{} absent (DeepSpeed's OneCycle requires it)", k);
      }
      param("cycle_max_lr", "optim.lr", json(), as_float);
      param("cycle_min_lr", "schedule.min_lr", json(), as_float);
      param("cycle_first_step_size", "schedule.cycle_first_step_size", json(2000), as_int);
      param("cycle_second_step_size", "schedule.cycle_second_step_size", json(), as_int);
      param("cycle_first_stair_count", "schedule.cycle_first_stair_count", json(0), as_int);
      param("cycle_second_stair_count", "schedule.cycle_second_stair_count", json(), as_int);
      param("decay_step_size", "schedule.decay_step_size", json(0), as_int);
      param("decay_lr_rate", "schedule.decay_lr_rate", json(0.0), as_float);
      param("cycle_momentum", "schedule.cycle_momentum", json(true),
            [&](const std::string& dk, const json& v) { return boolean(dk, v) ? "true" : "false"; });
      param("cycle_min_mom", "schedule.cycle_min_mom", json(0.8), as_float);
      param("cycle_max_mom", "schedule.cycle_max_mom", json(0.9), as_float);
      param("decay_mom_rate", "schedule.decay_mom_rate", json(0.0), as_float);
      if (!params.contains("cycle_second_step_size")) set_key(c_, "schedule.cycle_second_step_size", "0", origin_);
      if (!params.contains("cycle_second_stair_count")) set_key(c_, "schedule.cycle_second_stair_count", "-1", origin_);
      return;
    }
    // warmup_num_steps must be a positive integer (DeepSpeed's ValueError otherwise).
    if (params.contains("warmup_num_steps") && !is_auto(params.at("warmup_num_steps")) &&
        (!params.at("warmup_num_steps").is_number_integer() || params.at("warmup_num_steps").get<std::int64_t>() <= 0)) {
      refuse("scheduler.params.warmup_num_steps {} (DeepSpeed refuses it too: a positive integer is required)",
             show(params.at("warmup_num_steps")));
    } else {
      param("warmup_num_steps", "schedule.warmup_steps", json(1000), as_int);
    }
    // warmup_type: "log" by default; DeepSpeed takes any other value than linear or log as log, with a warning.
    param("warmup_type", "schedule.warmup_type", json("log"), [&](const std::string& dk, const json& v) {
      const std::string w = string(dk, v);
      if (w != "linear" && w != "log") {
        note("{} \"{}\" is neither linear nor log: DeepSpeed warns and warms up as log", dk, w);
        return std::string("\"log\"");
      }
      return json(w).dump();
    });
    if (type == "WarmupCosineLR") {
      param("warmup_min_ratio", "schedule.warmup_min_lr", json(0.0), ratio_of_lr);
      param("cos_min_ratio", "schedule.min_lr", json(0.0001), ratio_of_lr);
    } else {
      param("warmup_min_lr", "schedule.warmup_min_lr", json(0.0), as_float);
      // WarmupLR without warmup_max_lr keeps the optimizer's lr; WarmupDecayLR's default is 0.001.
      param("warmup_max_lr", "optim.lr", type == "WarmupDecayLR" ? json(0.001) : json(), as_float);
    }
    if (type != "WarmupLR") {
      if (!params.contains("total_num_steps")) {
        refuse("scheduler.params.total_num_steps absent (DeepSpeed's {} requires it)", type);
      } else if (!is_auto(params.at("total_num_steps")) &&
                 integer("scheduler.params.total_num_steps", params.at("total_num_steps")) <= 0) {
        refuse("scheduler.params.total_num_steps {} (a positive number of steps is required)",
               show(params.at("total_num_steps")));
      } else {
        param("total_num_steps", "schedule.decay_steps", json(), as_int);
      }
    }
  }

  // No scheduler section: DeepSpeed keeps the optimizer's lr, constant, from the first step.
  void no_scheduler() {
    if (given_in("schedule")) {
      return note("scheduler absent: the schedule.* keys the TOML file or --set gave stay (schedule.decay = {})",
                  key_value(c_, "schedule.decay"));
    }
    set_key(c_, "schedule.decay", "\"constant\"", origin_ + ": scheduler");
    set_key(c_, "schedule.warmup_steps", "0", origin_ + ": scheduler");
    note("scheduler absent → schedule.decay = \"constant\", schedule.warmup_steps = 0 (DeepSpeed keeps the "
         "optimizer's lr, optim.lr = {})",
         key_value(c_, "optim.lr"));
  }

  // No gradient_clipping: DeepSpeed's default (1.0 since v0.19.3; 0, no clipping, before it).
  void no_clipping() {
    if (given_in("optim.clip_grad")) {
      return note("gradient_clipping absent: optim.clip_grad stays {}, as the TOML file or --set gave it",
                  key_value(c_, "optim.clip_grad"));
    }
    set("gradient_clipping", "(absent)", "optim.clip_grad", "1.0",
        " (DeepSpeed's default since v0.19.3; earlier versions did not clip: give \"gradient_clipping\": 0 for that)");
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
      refuse("fp16.loss_scale {} (a static scale: not built, trident's loss scale is dynamic, fp16.loss_scale 0)",
             show(section.at("loss_scale")));
    } else if (section.contains("loss_scale")) {
      note("fp16.loss_scale {} → a dynamic loss scale", show(section.at("loss_scale")));
    }
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
      refuse("fp16.consecutive_hysteresis true (not built: trident restores the hysteresis when the scale grows, "
             "not after every good step)");
    } else if (section.contains("consecutive_hysteresis")) { ignored("fp16.consecutive_hysteresis", section.at("consecutive_hysteresis"), "no effect with this hysteresis");
    }
    if (given("fp16_master_weights_and_grads") &&
        boolean("fp16.fp16_master_weights_and_grads", section.at("fp16_master_weights_and_grads"))) {
      refuse("fp16.fp16_master_weights_and_grads true (not built: trident keeps fp32 master weights and gradients)");
    } else if (section.contains("fp16_master_weights_and_grads")) { ignored("fp16.fp16_master_weights_and_grads", section.at("fp16_master_weights_and_grads"),
              "fp32 master weights, as trident's");
    }
    if (section.contains("auto_cast")) ignored("fp16.auto_cast", section.at("auto_cast"), "trident casts inside the forward pass");
  }

  // DeepSpeed's bf16 section (precision_config.py); "bfloat16" is its old name.
  void map_bf16(const std::string& name, const json& section) {
    object(name, section);
    // fp16's loss-scaler keys: DeepSpeed up to 0.17.0 read only bf16.enabled and let them be; bf16 is not
    // loss-scaled. Later versions reject the keys; configs written for the earlier ones still carry them.
    static const std::set<std::string> loss_scaler = {"loss_scale", "initial_scale_power", "loss_scale_window",
                                                      "hysteresis", "consecutive_hysteresis", "min_loss_scale"};
    static const std::vector<std::string> known = {"enabled", "immediate_grad_update", "check_grad_overflow",
                                                   "bf16_master_weights_and_grads", "bf16_optimizer_states"};
    for (const auto& [k, v] : section.items()) {
      const std::string dk = name + "." + k;
      if (k == "enabled") continue;
      if (loss_scaler.count(k)) {
        ignored(dk, v, "bf16 runs without a loss scale; DeepSpeed before 0.17.1 ignored the key too");
      } else if (k == "immediate_grad_update") {
        ignored(dk, v, "when DeepSpeed's bf16 optimizer applies the update, not what it computes");
      } else if (k == "check_grad_overflow") {
        boolean(dk, v);  // applied below, once bf16.enabled is known
      } else if (k == "bf16_master_weights_and_grads" || k == "bf16_optimizer_states") {
        if (!boolean(dk, v)) {
          ignored(dk, v, "fp32 master weights and optimizer state, as trident's");
        } else if (zero_stage_ == 0) {
          refuse("{} true (DeepSpeed refuses it too without ZeRO stage 1, 2 or 3)", dk);
        } else {
          refuse("{} true (not built: trident keeps fp32 master weights, gradients and optimizer state)", dk);
        }
      } else {
        unknown_in(name, k, known);
      }
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
    // check_grad_overflow (default true): DeepSpeed's ZeRO 1 and 2 optimizer skips a bf16 step whose gradients
    // are not finite; its other bf16 optimizers (no ZeRO, ZeRO-3, ZeRO-1 with fp32 accumulation) do not check.
    const std::string dk = name + ".check_grad_overflow";
    const bool check = !section.contains("check_grad_overflow") || boolean(dk, section.at("check_grad_overflow"));
    const bool zero12 = (zero_stage_ == 1 && !fp32_accumulation_) || zero_stage_ == 2;
    if (zero12) {
      set(dk, section.contains("check_grad_overflow") ? show(section.at("check_grad_overflow")) : "(absent: true)",
          "optim.skip_nonfinite_steps", check ? "true" : "false",
          check ? " (a step with a non-finite gradient is skipped, as DeepSpeed's ZeRO 1 and 2 do)" : "");
    } else if (section.contains("check_grad_overflow")) {
      ignored(dk, section.at("check_grad_overflow"),
              fmt::format("DeepSpeed checks bf16 gradients under ZeRO 1 and 2 only; this file's stage {}{} does not",
                          zero_stage_, fp32_accumulation_ ? " with fp32 accumulation" : ""));
    }
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
        "pipeline_loading_checkpoint", "override_module_apply", "log_trace_cache_warnings",
        "stage3_allgather_sequential", "allgather_sequential", "enable_sanity_checks",
        "save_muon_momentum_buffer_in_memory", "leaf_module"};
    // Keys that change what is computed, when not at their "off" value.
    static const std::set<std::string> refused_if_on = {
        "zero_quantized_weights", "zero_quantized_nontrainable_weights", "zero_quantized_gradients",
        "zeropp_loco_param", "mics_hierarchical_params_gather", "zenflow"};
    // DeepSpeed's old switches for a CPU offload.
    static const std::map<std::string, std::string> old_offload = {{"cpu_offload", "the optimizer state"},
                                                                   {"cpu_offload_param", "the parameters"},
                                                                   {"cpu_offload_params", "the parameters"}};
    std::vector<std::string> known(tuning.begin(), tuning.end());
    known.insert(known.end(), refused_if_on.begin(), refused_if_on.end());
    for (const auto& [k, what] : old_offload) known.push_back(k);
    known.insert(known.end(), {"stage", "offload_optimizer", "offload_param", "zero_hpz_partition_size", "mics_shard_size",
                               "compute_grad_norm"});
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
        map_offload(dk, v, k == "offload_optimizer" ? "the optimizer state" : "the parameters");
      } else if (old_offload.count(k)) {
        if (!boolean(dk, v)) {
          ignored(dk, v, "off");
        } else {
          cpu_offload(dk, show(v), old_offload.at(k));
        }
      } else if (k == "compute_grad_norm") {
        boolean(dk, v);  // checked against the rest of the file once it is read (check_compute_grad_norm)
      } else if (refused_if_on.count(k)) {
        if ((v.is_boolean() && !v.get<bool>()) || v.is_null()) {
          ignored(dk, v, "off");
        } else {
          refuse("{} {} (not built by trident's ZeRO)", dk, show(v));
        }
      } else if (k == "zero_hpz_partition_size" || k == "mics_shard_size") {
        const bool off = v.is_number() && (k == "mics_shard_size" ? v.get<double>() <= 0 : v.get<double>() <= 1);
        if (!off) {
          refuse("{} {} (not built: trident's ZeRO partitions over the whole data-parallel group)", dk, show(v));
        } else {
          ignored(dk, v, "off");
        }
      } else {
        unknown_in("zero_optimization", k, known);
      }
    }
    if (!section.contains("stage")) set("zero_optimization.stage", "(absent)", "dist.zero_stage", "0", " (DeepSpeed's default 0)");
  }

  // offload_optimizer / offload_param: {"device": "none" | "cpu" | "nvme", ...} (the other keys tune the copy).
  void map_offload(const std::string& dk, const json& v, const std::string& what) {
    if (v.is_null()) return ignored(dk, v, "no offload");
    object(dk, v);
    const std::string device = v.contains("device") && !v.at("device").is_null() ? string(dk + ".device", v.at("device"))
                                                                                 : "none";
    if (device == "none") return ignored(dk, v, "device none");
    if (device == "cpu") return cpu_offload(dk + ".device", "\"cpu\"", what);
    if (device == "nvme") return refuse("{}.device \"nvme\" (not built: trident keeps {} in memory)", dk, what);
    fail("{}.device must be \"none\", \"cpu\" or \"nvme\", got {}", dk, show(v.at("device")));
  }
  // A CPU offload: a CPU run already holds everything in host memory, so it changes nothing there; a GPU
  // run does not build it (load_config checks the final train.device).
  void cpu_offload(const std::string& dk, const std::string& shown, const std::string& what) {
    c_.deepspeed_cpu_offload.push_back(fmt::format("{} {}", dk, shown));
    note("{} {}: a no-op on a CPU run ({} already lives in host memory); a GPU run refuses it", dk, shown, what);
  }

  // zero_optimization.compute_grad_norm false (DeepSpeed 0.19.5's fast path) only skips a norm nothing uses:
  // DeepSpeed refuses it with gradient clipping, an optimizer offload, or a stage other than 1 and 2.
  void check_compute_grad_norm(const json& root) {
    if (!root.contains("zero_optimization") || !root.at("zero_optimization").is_object()) return;
    const json& z = root.at("zero_optimization");
    if (!z.contains("compute_grad_norm")) return;
    const std::string dk = "zero_optimization.compute_grad_norm";
    if (boolean(dk, z.at("compute_grad_norm"))) return ignored(dk, z.at("compute_grad_norm"), "DeepSpeed's default");
    const double clip = root.contains("gradient_clipping") && root.at("gradient_clipping").is_number()
                            ? root.at("gradient_clipping").get<double>()
                            : 1.0;  // DeepSpeed's default
    const bool offload = z.contains("offload_optimizer") && z.at("offload_optimizer").is_object() &&
                         z.at("offload_optimizer").value("device", std::string("none")) != "none";
    if (zero_stage_ != 1 && zero_stage_ != 2) {
      refuse("{} false with ZeRO stage {} (DeepSpeed refuses it too: stages 1 and 2 only)", dk, zero_stage_);
    } else if (clip > 0) {
      refuse("{} false with gradient clipping at {} (DeepSpeed refuses it too: clipping needs the norm)", dk, clip);
    } else if (offload) {
      refuse("{} false with an optimizer offload (DeepSpeed refuses it too)", dk);
    } else {
      ignored(dk, z.at("compute_grad_norm"), "skips a norm nothing uses; trident computes it for metrics.jsonl, the "
              "update is the same");
    }
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
        cpu_offload(dk, "true", "every activation");
        continue;
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

  // DeepSpeed's sparse_attention section (docs/deepspeed.md#sparse-attention): its mode (absent: fixed) and
  // the keys DeepSpeed reads for that mode become model.sparse_attention.*; keys of other modes are dropped,
  // as DeepSpeed drops them. Through a ds_config, bigbird and bslongformer are bidirectional (DeepSpeed does
  // not read their attention key); trident's causal rule still applies inside a causal model.
  void map_sparse_attention(const json& section) {
    if (section.is_null()) return ignored("sparse_attention", section, "null");
    object("sparse_attention", section);
    static const std::map<std::string, std::vector<std::string>> read = {
        {"dense", {}},
        {"fixed",
         {"different_layout_per_head", "num_local_blocks", "num_global_blocks", "attention",
          "horizontal_global_attention", "num_different_global_patterns"}},
        {"variable",
         {"different_layout_per_head", "num_random_blocks", "local_window_blocks", "global_block_indices",
          "global_block_end_indices", "attention", "horizontal_global_attention"}},
        {"bigbird",
         {"different_layout_per_head", "num_random_blocks", "num_sliding_window_blocks", "num_global_blocks"}},
        {"bslongformer",
         {"different_layout_per_head", "num_sliding_window_blocks", "global_block_indices",
          "global_block_end_indices"}}};
    std::vector<std::string> known = {"mode", "block"};
    for (const auto& [mode, keys] : read)
      for (const std::string& k : keys)
        if (std::find(known.begin(), known.end(), k) == known.end()) known.push_back(k);
    for (const auto& [k, v] : section.items())
      if (std::find(known.begin(), known.end(), k) == known.end()) unknown_in("sparse_attention", k, known);
    const std::string mode = section.contains("mode") ? string("sparse_attention.mode", section.at("mode")) : "fixed";
    const auto it = read.find(mode);
    if (it == read.end()) fail("sparse_attention.mode {} is not one of dense, fixed, variable, bigbird, bslongformer",
                               show(section.at("mode")));
    set("sparse_attention.mode", section.contains("mode") ? show(section.at("mode")) : "(absent: fixed)",
        "model.sparse_attention.mode", json(mode).dump());
    for (const auto& [k, v] : section.items()) {
      if (k == "mode") continue;
      const std::string dk = "sparse_attention." + k;
      const bool reads = k == "block" || std::find(it->second.begin(), it->second.end(), k) != it->second.end();
      if (!reads) {
        ignored(dk, v, fmt::format("DeepSpeed does not read it for mode {}", mode));
        continue;
      }
      if (v.is_null()) {
        ignored(dk, v, "null: the default");
        continue;
      }
      set(dk, show(v), "model.sparse_attention." + k, v.dump());
    }
    if (mode == "bigbird" || mode == "bslongformer")
      note("sparse_attention: mode {} reads no attention key from a ds_config (bidirectional layouts); a causal "
           "model still hides later keys",
           mode);
  }

  // A section whose "enabled": true would change the run.
  void refuse_if_enabled(const std::string& k, const json& v, const std::string& what) {
    // These two have no "enabled": a section present is a request.
    const bool always = k == "compression_training";
    const bool on = always ? !v.is_null()
                           : v.is_object() ? v.contains("enabled") && v.at("enabled") == true : !v.is_null() && v != false;
    if (on) return refuse("{} enabled ({} is not built)", k, what);
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
        {"compression_training", "compression training (quantization, pruning)"}};
    if (k == "zero_optimization") return map_zero(v);
    if (k == "scheduler") return map_scheduler(v);
    if (k == "fp16") return map_fp16(v);
    if (k == "bf16" || k == "bfloat16") return map_bf16(k, v);
    if (k == "activation_checkpointing") return map_activation_checkpointing(v);
    if (k == "tensorboard") return map_tensorboard(v);
    if (k == "sparse_attention") return map_sparse_attention(v);
    if (k == "gradient_clipping") {
      if (is_auto(v)) return keep(k, "optim.clip_grad");
      return set(k, show(v), "optim.clip_grad", toml_float(number(k, v)));
    }
    if (k == "steps_per_print") {
      // Only DeepSpeed's own progress print: metrics.jsonl keeps every train.log_interval step.
      return ignored(k, v, fmt::format("DeepSpeed's own progress print; trident logs every train.log_interval = {} "
                                       "steps, metrics.jsonl included",
                                       key_value(c_, "train.log_interval")));
    }
    if (k == "gradient_allreduce_op") {
      std::string op = string(k, v);
      std::transform(op.begin(), op.end(), op.begin(), [](unsigned char ch) { return std::tolower(ch); });
      if (op != "mean" && op != "sum") fail("gradient_allreduce_op must be \"mean\" or \"sum\", got {}", show(v));
      if (op == "sum" && zero_stage_ == 3) {
        return refuse("gradient_allreduce_op \"sum\" with ZeRO stage 3 (DeepSpeed refuses it too)");
      }
      return set(k, show(v), "dist.gradient_reduce", json(op).dump(),
                 op == "sum" ? " (the data-parallel ranks' gradients added: data_parallel_size × the mean)" : "");
    }
    if (k == "tensor_parallel") {
      const bool on = v.is_object() && v.contains("autotp_size") && v.at("autotp_size").is_number() &&
                      v.at("autotp_size").get<double>() > 1;
      if (on) {
        return refuse("tensor_parallel.autotp_size {} (not built: use dist.tensor_parallel_size)",
                      show(v.at("autotp_size")));
      }
      return ignored(k, v, "no tensor parallelism asked");
    }
    if (k == "sequence_parallel_size") {
      const std::int64_t sp = integer(k, v);
      if (sp < 1) fail("sequence_parallel_size must be a positive integer, got {}", show(v));
      if (sp == 1) return ignored(k, v, "1");
      if (given_in("dist.context_parallel_size"))
        return ignored(k, v, fmt::format("dist.context_parallel_size = {} is given", key_value(c_, "dist.context_parallel_size")));
      set(k, show(v), "dist.context_parallel_size", fmt::format("{}", sp), " (DeepSpeed-Ulysses: the sequence split)");
      return set(k, show(v), "dist.context_parallel_algorithm", "\"all_to_all\"", " (Ulysses' head all-to-all)");
    }
    if (k == "data_types") {
      object(k, v);
      for (const auto& [dk, dv] : v.items()) {
        if (dk != "grad_accum_dtype") unknown_in("data_types", dk, {"grad_accum_dtype"});
        if (!dv.is_null() && dv != "fp32") {
          refuse("data_types.grad_accum_dtype {} (not built: trident accumulates gradients in fp32)", show(dv));
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
                                      "fp16", "bf16", "gradient_clipping", "steps_per_print", "gradient_allreduce_op",
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
                                              std::int64_t data_parallel_size, const std::set<std::string>& given) {
  json root;
  try {
    root = json::parse(json_text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {  // a syntax error, or a number out of range (1e400)
    std::string what = e.what();
    if (const auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    TRIDENT_FAIL("{}: invalid JSON: {}", origin, what);
  }
  return Mapper(config, origin, data_parallel_size, given).run(root);
}

std::vector<std::string> apply_deepspeed_file(Config& config, const std::string& path,
                                              std::int64_t data_parallel_size, const std::set<std::string>& given) {
  std::error_code ec;
  TRIDENT_CHECK(!std::filesystem::is_directory(path, ec),
                "train.deepspeed_config '{}': is a directory, not a DeepSpeed JSON config", path);
  std::ifstream in(path, std::ios::binary);
  TRIDENT_CHECK(in.good(), "train.deepspeed_config '{}': cannot read the file", path);
  std::stringstream text;
  text << in.rdbuf();
  TRIDENT_CHECK(!in.bad(), "train.deepspeed_config '{}': a read error", path);
  return apply_deepspeed_json(config, text.str(), path, data_parallel_size, given);
}

std::string deepspeed_resolved_line(const Config& c) {
  const std::string& origin = c.applied_deepspeed_config;
  if (!c.deepspeed_cpu_offload.empty() && c.train.device != "cpu") {
    TRIDENT_FAIL("{}: {} cannot apply on a train.device = \"{}\" run (trident keeps everything on the training "
                 "device; on a CPU run the offload changes nothing)",
                 origin, fmt::join(c.deepspeed_cpu_offload, ", "), c.train.device);
  }
  const optim::ScheduleOptions s = detail::schedule_options(c);
  std::string lr;
  const std::string warmup = fmt::format("{} warmup from {} to {} over {} steps", c.schedule.warmup_type,
                                         s.warmup_min_lr, s.peak_lr, std::max<std::int64_t>(2, s.warmup_steps));
  switch (s.decay) {
    case optim::Decay::deepspeed_warmup:
      lr = fmt::format("DeepSpeed's WarmupLR ({}, then constant)", warmup);
      break;
    case optim::Decay::deepspeed_warmup_decay:
      lr = fmt::format("DeepSpeed's WarmupDecayLR ({}, then linear to 0 at step {})", warmup, s.decay_steps + 2);
      break;
    case optim::Decay::deepspeed_warmup_cosine:
      lr = fmt::format("DeepSpeed's WarmupCosineLR ({}, then a cosine to {} at step {})", warmup, s.min_lr,
                       s.decay_steps + 1);
      break;
    case optim::Decay::deepspeed_one_cycle: {
      const std::vector<std::string>& keys = optim::optimizer_def(c.optim.name).keys;
      const bool has_betas = std::find(keys.begin(), keys.end(), "betas") != keys.end();
      lr = fmt::format("DeepSpeed's OneCycle ({} → {} → {} over {} + {} steps{}{})", s.min_lr, s.peak_lr, s.min_lr,
                       s.cycle_first_step_size, s.cycle_second_step_size,
                       s.decay_step_size > 0 && s.decay_lr_rate > 0 ? ", then decaying" : ", then constant",
                       !s.cycle_momentum ? ""
                       : has_betas      ? fmt::format("; beta1 cycled {} → {}, beta2 0.99", s.cycle_max_mom, s.cycle_min_mom)
                                        : fmt::format("; no momentum cycling: optim.name = \"{}\" has no betas, as "
                                                      "DeepSpeed disables it for such an optimizer",
                                                      c.optim.name));
      break;
    }
    case optim::Decay::deepspeed_lr_range_test:
      lr = fmt::format("DeepSpeed's LRRangeTest (from {}, × (1 + {} × steps / {}){})", s.peak_lr,
                       s.lr_range_test_step_rate, s.lr_range_test_step_size,
                       s.lr_range_test_staircase ? ", in stairs" : "");
      break;
    case optim::Decay::constant:
      lr = s.warmup_steps > 0 ? fmt::format("linear warmup to {} over {} steps, then constant", s.peak_lr, s.warmup_steps)
                              : fmt::format("constant {}", s.peak_lr);
      break;
    default:
      lr = fmt::format("trident's schedule.decay = \"{}\" (peak {}, {} warmup steps)", c.schedule.decay, s.peak_lr,
                       s.warmup_steps);
  }
  const std::string clip = c.optim.clip_grad > 0 ? fmt::format("clipped to global norm {}", c.optim.clip_grad)
                                                 : std::string("not clipped");
  return fmt::format("{}: resolved: learning rate {}; gradients {}{}", origin, lr, clip,
                     c.dist.gradient_reduce == "sum" ? ", summed over the data-parallel ranks" : "");
}

}  // namespace trident::train
