#include "trident/train/config/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <toml++/toml.h>
#include <type_traits>

#include "trident/core/error.h"
#include "trident/core/text.h"
#include "trident/models/family.h"
#include "trident/train/config/config_domain.h"
#include "trident/train/config/deepspeed_config.h"
#include "trident/train/config/model_options.h"

namespace trident::train {

namespace {

template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};

template <typename T>
constexpr const char* type_name() {
  if constexpr (is_optional<T>::value) return type_name<typename T::value_type>();
  if constexpr (std::is_same_v<T, std::int64_t>) return "integer";
  if constexpr (std::is_same_v<T, double>) return "float";
  if constexpr (std::is_same_v<T, bool>) return "boolean";
  if constexpr (std::is_same_v<T, std::string>) return "string";
  if constexpr (std::is_same_v<T, std::vector<double>>) return "list of floats";
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return "list of integers";
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return "list of strings";
}

// A value as TOML on one line (errors are one line): tables inline, strings
// escaped ("a\nb", never a multi-line string), floats as short as they read.
constexpr toml::format_flags kOneLine = toml::format_flags::relaxed_float_precision;
std::string describe_node(const toml::node& node) {
  std::ostringstream out;
  if (const auto* tbl = node.as_table()) {
    toml::table copy = *tbl;  // a [section] table would print over several lines
    copy.is_inline(true);
    out << toml::toml_formatter{copy, kOneLine};
  } else {
    node.visit([&](auto&& n) { out << toml::toml_formatter{n, kOneLine}; });
  }
  return out.str();
}

// Converts a TOML node to T, or throws naming the key, the origin and what was expected.
template <typename T>
T convert(const toml::node& node, const std::string& key, const std::string& origin) {
  auto fail = [&]() -> T {
    const std::string type = type_name<T>();
    const char* article = type == "integer" ? "an" : "a";
    // A single value where a list goes: show the list's syntax, as the value came (a file or --set).
    std::string hint;
    if (type.starts_with("list") && !node.is_array() && !node.is_table()) {
      const std::string list = "[" + describe_node(node) + "]";
      hint = origin.starts_with("--set ")
                 ? fmt::format(" (a list is written in brackets: --set '{}={}')", key, list)
                 : fmt::format(" (a list is written in brackets: {} = {})", key.substr(key.rfind('.') + 1), list);
    }
    TRIDENT_FAIL("{}: key '{}' must be {} {}, got {}{}", origin, key, article, type, describe_node(node), hint);
  };
  if constexpr (std::is_same_v<T, std::int64_t>) {
    if (auto v = node.value_exact<std::int64_t>()) return *v;
    return fail();
  } else if constexpr (std::is_same_v<T, double>) {
    if (node.is_integer()) return static_cast<double>(*node.value<std::int64_t>());
    if (auto v = node.value_exact<double>()) return *v;
    return fail();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (auto v = node.value_exact<bool>()) return *v;
    return fail();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (auto v = node.value_exact<std::string>()) return *v;
    return fail();
  } else {
    using E = typename T::value_type;
    const toml::array* arr = node.as_array();
    if (!arr) return fail();
    T out;
    for (const toml::node& item : *arr) {
      out.push_back(convert<E>(item, key + "[]", origin));
    }
    return out;
  }
}

template <typename T>
std::string format_value(const T& v) {
  if constexpr (is_optional<T>::value) {
    return v ? format_value(*v) : std::string();  // unset: to_toml leaves the key out
  } else if constexpr (std::is_same_v<T, std::string>) {
    std::ostringstream out;
    out << toml::value<std::string>(v);
    return out.str();
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, double>) {
    // The shortest text that reads back as the same double (0.0003, not 0.00029999999999999997),
    // kept a TOML float: 1 is written 1.0.
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    std::string text = fmt::format("{}", v);
    if (text.find_first_of(".e") == std::string::npos) text += ".0";
    return text;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return fmt::format("{}", v);
  } else {
    std::vector<std::string> items;
    for (const auto& x : v) items.push_back(format_value(x));
    return fmt::format("[{}]", fmt::join(items, ", "));
  }
}

struct Field {
  std::string section;
  std::string name;
  std::string type;
  std::function<void(Config&, const toml::node&, const std::string&)> set;
  std::function<std::string(const Config&)> get;
  std::string key() const { return section + "." + name; }
};

template <typename T>
void check_domain(const T& value, const Domain& d, const char* meaning, const std::string& key,
                  const std::string& origin) {
  if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>) {
    TRIDENT_CHECK(d.contains(static_cast<double>(value)), "{}: key '{}' must be {}{}, got {}", origin, key,
                  d.expected, meaning, value);
  } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>> || std::is_same_v<T, std::vector<double>>) {
    for (const auto& v : value) check_domain(v, d, meaning, key, origin);
  } else if constexpr (std::is_same_v<T, std::optional<double>> || std::is_same_v<T, std::optional<std::int64_t>>) {
    if (value) check_domain(*value, d, meaning, key, origin);
  }
}

// `meaning` completes the domain's words for the error, e.g. " (0 = off)".
template <typename S, typename T>
Field field(const char* section, const char* name, S Config::*sec, T S::*member, Domain domain = kAny,
            const char* meaning = "") {
  Field f;
  f.section = section;
  f.name = name;
  f.type = type_name<T>();
  const std::string key = f.key();
  f.set = [sec, member, key, domain, meaning](Config& c, const toml::node& node, const std::string& origin) {
    T value;
    if constexpr (is_optional<T>::value) {
      value = convert<typename T::value_type>(node, key, origin);
    } else {
      value = convert<T>(node, key, origin);
    }
    check_domain(value, domain, meaning, key, origin);
    (c.*sec).*member = std::move(value);
  };
  f.get = [sec, member](const Config& c) { return format_value((c.*sec).*member); };
  return f;
}

// A model.* key: a row of the model options' table (train/config/model_options.h), of its field's type.
Field model_field(const ModelOption& option) {
  Field f;
  f.section = "model";
  f.name = option.name;
  const std::string key = f.key();
  std::visit(
      [&](const auto& initial) {
        using T = std::decay_t<decltype(initial)>;
        f.type = type_name<T>();
        f.set = [&option, key](Config& c, const toml::node& node, const std::string& origin) {
          T value = convert<T>(node, key, origin);
          check_domain(value, option.domain, option.meaning, key, origin);
          option.set(c.model, OptionValue{std::in_place_type<T>, std::move(value)});
        };
        f.get = [&option](const Config& c) {
          const std::optional<OptionValue> value = option.get(c.model);
          return value ? format_value(std::get<T>(*value)) : std::string();  // absent: to_toml leaves the key out
        };
      },
      option.initial);
  return f;
}

// log.tensorboard: a boolean (true = the run directory's "tensorboard") or a directory path.
Field tensorboard_field() {
  Field f;
  f.section = "log";
  f.name = "tensorboard";
  f.type = "boolean or string";
  f.set = [key = f.key()](Config& c, const toml::node& node, const std::string& origin) {
    if (const auto on = node.value_exact<bool>()) {
      c.log.tensorboard = *on ? "tensorboard" : "";
      return;
    }
    const auto dir = node.value_exact<std::string>();
    TRIDENT_CHECK(dir && !dir->empty(),
                  "{}: key '{}' must be true, false or a directory path (a non-empty string), got {}", origin, key,
                  describe_node(node));
    c.log.tensorboard = *dir;
  };
  f.get = [](const Config& c) {
    return c.log.tensorboard.empty() ? std::string("false") : format_value(c.log.tensorboard);
  };
  return f;
}

const std::vector<Field>& fields() {
  static const std::vector<Field> all = [] {
    std::vector<Field> f;
    using C = Config;
    for (const ModelOption& option : model_options())
      if (option.unset != Unset::no_key) f.push_back(model_field(option));
#define DATA(n, ...) f.push_back(field("data", #n, &C::data, &DataConfig::n __VA_OPT__(,) __VA_ARGS__))
    DATA(tokenizer); DATA(paths); DATA(weights, kNonNegativeFinite); DATA(split); DATA(valid_paths); DATA(cache_dir);
    DATA(prefetch, kNonNegative, " (0 = no background loading)"); DATA(eod_mask_loss);
    DATA(mlm_probability, kProbability); DATA(whole_word_masking); DATA(packing); DATA(reset_attention_mask);
    DATA(reset_position_ids);
#undef DATA
#define TRAIN(n, ...) f.push_back(field("train", #n, &C::train, &TrainConfig::n __VA_OPT__(,) __VA_ARGS__))
    TRAIN(seq_len, kPositive); TRAIN(micro_batch_size, kPositive);
    TRAIN(global_batch_size, kNonNegative, " (0 = micro_batch_size × data_parallel_size)"); TRAIN(steps, kPositive);
    TRAIN(epochs, kPositiveFinite);
    TRAIN(seed); TRAIN(precision); TRAIN(log_interval, kPositive); TRAIN(eval_interval, kNonNegative, " (0 = never)");
    TRAIN(eval_steps, kPositive); TRAIN(activation_checkpointing);
    TRAIN(peak_gflops, kNonNegativeFinite, " (0 = measure)");
    TRAIN(device); TRAIN(threads, kNonNegative, " (0 = cores / ranks on the node)");
    TRAIN(exit_duration_minutes, kNonNegativeFinite, " (0 = never)"); TRAIN(deepspeed_config);
    TRAIN(early_stopping_patience, kNonNegative, " (0 = off)"); TRAIN(early_stopping_min_delta, kNonNegativeFinite);
#undef TRAIN
#define OPTIM(n, ...) f.push_back(field("optim", #n, &C::optim, &OptimConfig::n __VA_OPT__(,) __VA_ARGS__))
    OPTIM(name); OPTIM(lr, kPositiveFinite); OPTIM(betas, kFraction); OPTIM(eps, kNonNegativeFinite);
    OPTIM(weight_decay, kNonNegativeFinite); OPTIM(momentum, kNonNegativeFinite);
    OPTIM(clip_grad, kNonNegativeFinite, " (0 = off)"); OPTIM(initial_loss_scale, kPositiveFinite);
    OPTIM(loss_scale_window, kPositive); OPTIM(min_loss_scale, kPositiveFinite); OPTIM(loss_scale_hysteresis, kPositive);
    OPTIM(bias_correction); OPTIM(skip_nonfinite_steps);
#undef OPTIM
#define SCHEDULE(n, ...) \
  f.push_back(field("schedule", #n, &C::schedule, &ScheduleConfig::n __VA_OPT__(,) __VA_ARGS__))
    SCHEDULE(warmup_steps, kNonNegative); SCHEDULE(decay); SCHEDULE(decay_steps, kNonNegative, " (0 = train.steps)");
    SCHEDULE(min_lr, kNonNegativeFinite); SCHEDULE(wsd_decay_steps, kNonNegative); SCHEDULE(wsd_decay_style);
    SCHEDULE(warmup_type); SCHEDULE(warmup_min_lr, kNonNegativeFinite); SCHEDULE(cycle_first_step_size, kPositive);
    SCHEDULE(cycle_second_step_size, kNonNegative, " (0 = cycle_first_step_size)");
    SCHEDULE(cycle_first_stair_count, kNonNegative, " (0 = no stairs)"); SCHEDULE(cycle_second_stair_count);
    SCHEDULE(decay_step_size, kNonNegative, " (0 = no decay)"); SCHEDULE(decay_lr_rate, kNonNegativeFinite);
    SCHEDULE(cycle_momentum); SCHEDULE(cycle_min_mom, kFraction); SCHEDULE(cycle_max_mom, kFraction);
    SCHEDULE(decay_mom_rate, kNonNegativeFinite); SCHEDULE(lr_range_test_step_size, kPositive);
    SCHEDULE(lr_range_test_step_rate, kNonNegativeFinite); SCHEDULE(lr_range_test_staircase);
#undef SCHEDULE
#define DIST(n, ...) f.push_back(field("dist", #n, &C::dist, &DistConfig::n __VA_OPT__(,) __VA_ARGS__))
    DIST(data_parallel_size, kNonNegative, " (0 = inferred)"); DIST(tensor_parallel_size, kPositive);
    DIST(pipeline_parallel_size, kPositive); DIST(pipeline_num_layers, kPositive);
    DIST(virtual_pipeline_size, kPositive);
    DIST(pipeline_schedule); DIST(sequence_parallel); DIST(zero_stage, kZeroStage); DIST(timeout_s, kPositiveFinite);
    DIST(expert_parallel_size, kPositive); DIST(gradient_reduce); DIST(context_parallel_size, kPositive);
    DIST(context_parallel_algorithm);
#undef DIST
#define CKPT(n, ...) \
  f.push_back(field("checkpoint", #n, &C::checkpoint, &CheckpointConfig::n __VA_OPT__(,) __VA_ARGS__))
    CKPT(dir); CKPT(interval, kNonNegative, " (0 = only at the end)"); CKPT(keep, kNonNegative, " (0 = all)");
    CKPT(resume); CKPT(keep_best, kNonNegative, " (0 = off)"); CKPT(monitor);
#undef CKPT
#define LOG(n, ...) f.push_back(field("log", #n, &C::log, &LogConfig::n __VA_OPT__(,) __VA_ARGS__))
    LOG(progress); LOG(metrics_file); LOG(straggler_threshold, kAtLeastOne);
    f.push_back(tensorboard_field());
#undef LOG
    return f;
  }();
  return all;
}

const Field* find_field(const std::string& key) {
  for (const Field& f : fields())
    if (f.key() == key) return &f;
  return nullptr;
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& origin) {
  const std::string near = nearest_key(key);
  if (!near.empty()) TRIDENT_FAIL("{}: unknown key '{}' (did you mean '{}'?)", origin, key, near);
  TRIDENT_FAIL("{}: unknown key '{}' (see `trident train --help-config` for the known keys)", origin, key);
}

void apply_table(Config& config, const toml::table& table, const std::string& prefix, const std::string& origin) {
  for (const auto& [k, node] : table) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    // Errors point at the line of the file: "run.toml:12: key 'train.steps' must be ...".
    const auto line = node.source().begin.line;
    const std::string where = line > 0 ? fmt::format("{}:{}", origin, line) : origin;
    const Field* f = find_field(key);
    if (const toml::table* sub = node.as_table(); sub && !f) {
      // A table is a section only at the top level; deeper tables are unknown
      // keys, unless they name a key (then convert() reports the wrong type).
      // (model.sparse_attention is a table inside the model section: its keys are model.sparse_attention.*.)
      bool is_section = std::any_of(fields().begin(), fields().end(), [&](const Field& g) {
        return prefix.empty() ? g.section == key : g.key().starts_with(key + ".");
      });
      if (!is_section) unknown_key(key, where);
      apply_table(config, *sub, key, origin);
      continue;
    }
    if (!f) unknown_key(key, where);
    f->set(config, node, where);
  }
}

}  // namespace

std::vector<ConfigKey> config_keys() {
  std::vector<ConfigKey> out;
  for (const Field& f : fields()) out.push_back({f.key(), f.type});
  return out;
}

std::string nearest_key(const std::string& key) {
  const auto dot = key.rfind('.');
  const bool has_section = dot != std::string::npos;
  const std::string section = has_section ? key.substr(0, dot) : std::string();
  const std::string bare = has_section ? key.substr(dot + 1) : key;
  std::string best;
  std::pair<std::size_t, std::size_t> best_score{std::string::npos, 0};
  // Lower distance first; on a tie, a key in the section that was typed.
  auto consider = [&](const std::string& candidate, std::size_t d, std::size_t other_section) {
    if (std::pair{d, other_section} < best_score) {
      best_score = {d, other_section};
      best = candidate;
    }
  };
  // Plain edit distance over short names suggests unrelated keys ("warmup" is
  // 4 edits from "arch"), so each kind of closeness has its own bar.
  for (const Field& f : fields()) {
    const std::size_t other_section = has_section && section != f.section ? 1 : 0;
    // A typo anywhere in the key: "trian.steps", "model.layers".
    const std::size_t whole = edit_distance(key, f.key());
    if (whole <= std::max<std::size_t>(3, key.size() / 4)) consider(f.key(), whole, other_section);
    // The name, mostly the same word, perhaps in another section: "train.lr".
    const std::size_t name = edit_distance(bare, f.name);
    if (2 * name < bare.size()) consider(f.key(), name + other_section, other_section);
    // A shortened name: "schedule.warmup", "dist.zero", "train.batch_size"; a
    // shortened name in another section is two mistakes.
    if (bare.size() >= 3 && f.name.find(bare) != std::string::npos) {
      consider(f.key(), 1 + 2 * other_section, other_section);
    }
  }
  if (!has_section) {  // a section header: "[trian]", "[optimizer]"
    for (const Field& f : fields()) {
      const std::size_t d = edit_distance(key, f.section);
      const bool contains = key.find(f.section) != std::string::npos || f.section.find(key) != std::string::npos;
      if (d > 0 && (2 * d < key.size() || contains)) consider(f.section, contains ? 1 : d, 0);
    }
  }
  return best;
}

void apply_toml(Config& config, const std::string& toml_text, const std::string& origin) {
  toml::table table;
  try {
    table = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    TRIDENT_FAIL("{}:{}:{}: invalid TOML: {}", origin, src.begin.line, src.begin.column, e.description());
  }
  apply_table(config, table, "", origin);
}

void apply_file(Config& config, const std::string& path) {
  std::error_code ec;
  // An ifstream opens a directory and reads it as empty: the defaults would run.
  TRIDENT_CHECK(!std::filesystem::is_directory(path, ec),
                "cannot read config file '{}': it is a directory, not a TOML file", path);
  std::ifstream in(path);
  TRIDENT_CHECK(in.good(), "cannot read config file '{}'", path);
  std::stringstream buf;
  buf << in.rdbuf();
  TRIDENT_CHECK(!in.bad(), "cannot read config file '{}': a read error", path);
  apply_toml(config, buf.str(), path);
}

namespace {
// `text` without its leading and trailing spaces and tabs.
std::string trim_blanks(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return std::string();
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}
}  // namespace

void apply_override(Config& config, const std::string& assignment) {
  // Spaces around '=' are allowed, as in a TOML file ("train.steps = 10").
  const auto trim = trim_blanks;
  const auto eq = assignment.find('=');
  const std::string key = eq == std::string::npos ? std::string() : trim(assignment.substr(0, eq));
  TRIDENT_CHECK(!key.empty(), "--set '{}': expected section.key=value", assignment);
  const std::string value = trim(assignment.substr(eq + 1));
  const std::string origin = fmt::format("--set {}", assignment);
  const Field* f = find_field(key);
  if (!f) unknown_key(key, origin);
  toml::table parsed;
  bool ok = true;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error& e) {
    ok = false;
    // A number TOML cannot hold (too many digits for 64 bits) gets the words a config file's would,
    // not "must be an integer".
    const bool numeric_key = f->type != "string" && f->type != "boolean" && f->type != "list of strings";
    const bool looks_numeric =
        std::any_of(value.begin(), value.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); }) &&
        std::all_of(value.begin(), value.end(), [](char ch) {
          return std::isdigit(static_cast<unsigned char>(ch)) || std::strchr("+-._eE", ch) != nullptr;
        });
    TRIDENT_CHECK(!(numeric_key && looks_numeric), "{}: invalid value: {}", origin, e.description());
  }
  if (!ok || (f->type == "string" && !parsed["v"].is_string())) {
    // A bare word (--set train.precision=bf16) is a string.
    parsed = toml::table{{"v", value}};
  }
  f->set(config, *parsed.get("v"), origin);
}

namespace {

// The model keys a preset fills that a file may also set: the architecture a resume must match, held in
// the configuration (model.arch left at its default follows the preset).
bool preset_fills(const ModelOption& o) {
  return o.resume_must_match && (o.unset == Unset::keeps || o.unset == Unset::absent || o.name == "arch");
}

bool sets_preset(const std::string& assignment) {
  const std::string key = assignment.substr(0, assignment.find('='));
  const auto first = key.find_first_not_of(" \t");
  return first != std::string::npos && key.substr(first, key.find_last_not_of(" \t") - first + 1) == "model.preset";
}

// The overrides in order, on top of the file `path` (and a DeepSpeed config). A `--set model.preset` first
// drops the file's architecture keys: the command line names another model than the file's, and a preset
// under the file's sizes would silently be the file's model.
void apply_overrides(Config& config, const std::vector<std::string>& overrides, const std::string& path,
                     std::vector<std::string>* notes) {
  const auto preset = std::find_if(overrides.begin(), overrides.end(), sets_preset);
  if (preset != overrides.end() && !path.empty()) {
    const Config defaults;
    std::vector<std::string> dropped;
    for (const ModelOption& o : model_options()) {
      const std::string key = "model." + o.name;
      if (!preset_fills(o) || key_value(config, key) == key_value(defaults, key)) continue;
      dropped.push_back(fmt::format("{} = {}", key, key_value(config, key)));
      o.set(config.model, o.initial);
      config.model.given.erase(o.name);
    }
    if (notes && !dropped.empty()) {
      notes->push_back(fmt::format("--set {}: the preset replaces the model of {}, whose {} are dropped (a --set is "
                                   "later and more explicit than the file; --set a key to keep it)",
                                   *preset, path, fmt::join(dropped, ", ")));
    }
  }
  for (const auto& o : overrides) apply_override(config, o);
}

// One line when model.preset and explicit keys both set a size: the explicit key wins.
void note_preset_and_keys(const Config& config, std::vector<std::string>* notes) {
  if (!notes || config.model.preset.empty() || !config.model.from_pretrained.empty()) return;
  models::TransformerSpec preset;
  try {
    preset = models::preset(config.model.preset);
  } catch (const Error&) {
    return;  // an unknown preset is refused, by name, where the model is built
  }
  std::vector<std::string> won;
  for (const ModelOption& o : model_options()) {
    if (!preset_fills(o) || o.name == "arch") continue;
    models::TransformerSpec given = preset;
    o.apply(config.model, given);
    const std::string mine = to_string(o.compared(given)), its = to_string(o.compared(preset));
    if (mine != its) won.push_back(fmt::format("model.{} = {} (the preset's {})", o.name, mine, its));
  }
  if (!won.empty()) {
    notes->push_back(fmt::format("model.preset '{}' and explicit keys set the same sizes; the explicit keys win: {}",
                                 config.model.preset, fmt::join(won, ", ")));
  }
}

}  // namespace

namespace {

// The keys ("optim.clip_grad") the TOML file `path` and the overrides give.
std::set<std::string> given_keys(const std::string& path, const std::vector<std::string>& overrides) {
  std::set<std::string> keys;
  if (!path.empty()) {
    const toml::table file = toml::parse_file(path);  // already read once by load_config: it parses
    for (const auto& [section, node] : file) {
      if (const toml::table* t = node.as_table()) {
        for (const auto& [key, value] : *t) keys.insert(std::string(section.str()) + "." + std::string(key.str()));
      }
    }
  }
  for (const std::string& o : overrides) keys.insert(trim_blanks(o.substr(0, o.find('='))));
  return keys;
}

// A run's length is train.steps or train.epochs: both given is an error naming both.
void check_steps_or_epochs(const Config& config, const std::string& path, const std::vector<std::string>& overrides) {
  if (!config.train.epochs) return;
  const std::set<std::string> given = given_keys(path, overrides);
  TRIDENT_CHECK(!given.contains("train.steps"),
                "train.steps = {} and train.epochs = {} are both given{}: a run's length is counted in steps or in "
                "epochs, not both; drop one of them",
                config.train.steps, format_value(*config.train.epochs),
                path.empty() ? std::string(" (by --set)") : fmt::format(" (by {} or --set)", path));
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   std::vector<std::string>* notes) {
  Config config;
  if (!path.empty()) apply_file(config, path);
  apply_overrides(config, overrides, path, notes);
  note_preset_and_keys(config, notes);
  check_steps_or_epochs(config, path, overrides);
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides, int world_size,
                   std::vector<std::string>* notes) {
  // First without the DeepSpeed config: which file it is (the TOML file's or an override's), and the
  // parallel sizes that give the data-parallel size its batch keys are checked against.
  const Config plain = load_config(path, overrides);
  if (plain.train.deepspeed_config.empty()) return load_config(path, overrides, notes);
  const std::string ds_path = plain.train.deepspeed_config;
  const std::int64_t tp = plain.dist.tensor_parallel_size, pp = plain.dist.pipeline_parallel_size;
  const std::int64_t cp = plain.dist.context_parallel_size;
  std::int64_t dp = plain.dist.data_parallel_size;
  if (dp == 0) {
    TRIDENT_CHECK(tp >= 1 && pp >= 1 && cp >= 1 && tp <= world_size && pp <= world_size && cp <= world_size &&
                      world_size % (tp * pp * cp) == 0,
                  "dist: tp × pp × cp = {} × {} × {} does not divide the {} ranks of the job", tp, pp, cp, world_size);
    dp = world_size / (tp * pp * cp);
  }
  Config config;
  if (!path.empty()) apply_file(config, path);
  std::vector<std::string> lines = apply_deepspeed_file(config, ds_path, dp, given_keys(path, overrides));
  apply_overrides(config, overrides, path, &lines);
  note_preset_and_keys(config, &lines);
  check_steps_or_epochs(config, path, overrides);
  // Its values are now in the configuration: the resolved config (config.toml) stands on its own.
  config.train.deepspeed_config.clear();
  config.applied_deepspeed_config = ds_path;
  lines.push_back(deepspeed_resolved_line(config));
  if (notes) notes->insert(notes->end(), lines.begin(), lines.end());
  return config;
}

void set_key(Config& config, const std::string& key, const std::string& toml_value, const std::string& origin) {
  const Field* f = find_field(key);
  TRIDENT_CHECK(f != nullptr, "{}: internal: no key '{}'", origin, key);
  toml::table parsed = toml::parse("v = " + toml_value);
  f->set(config, *parsed.get("v"), origin);
}

std::string key_value(const Config& config, const std::string& key) {
  const Field* f = find_field(key);
  TRIDENT_CHECK(f != nullptr, "internal: no key '{}'", key);
  return f->get(config);
}

std::vector<double> optim_setting(const Config& config, const std::string& name) {
  const std::string key = "optim." + name;
  const toml::table parsed = toml::parse("v = " + key_value(config, key));
  const toml::node& v = *parsed.get("v");
  std::vector<double> out;
  const auto number = [&](const toml::node& n) {
    if (const auto b = n.value_exact<bool>()) return out.push_back(*b ? 1.0 : 0.0);  // a switch: 1 or 0
    const std::optional<double> x = n.value<double>();
    TRIDENT_CHECK(x, "internal: optimizer setting '{}' is not a number, a boolean or a list of numbers", key);
    out.push_back(*x);
  };
  if (const toml::array* a = v.as_array()) {
    for (const toml::node& n : *a) number(n);
  } else {
    number(v);
  }
  return out;
}

std::string to_toml(const Config& config) {
  std::string out;
  if (!config.applied_deepspeed_config.empty()) {
    out += fmt::format("# DeepSpeed config {} applied: its mapping is in the values below\n",
                       format_value(config.applied_deepspeed_config));
  }
  std::string section;
  for (const Field& f : fields()) {
    if (f.section != section) {
      section = f.section;
      out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", section);
    }
    const std::string value = f.get(config);
    if (f.key() == "train.steps" && config.train.epochs) {
      // Resolved from train.epochs at start (train/setup.h): a key here would be both.
      out += fmt::format("# {} = {}: resolved from train.epochs\n", f.name, value);
      continue;
    }
    const auto origin = f.section == "model" ? config.model.origin.find(f.name) : config.model.origin.end();
    const std::string source = origin != config.model.origin.end() ? "  # " + origin->second : "";
    // (A present string value is quoted, so empty means unset for every type.)
    out += value.empty() ? fmt::format("# {} unset: the default\n", f.name)
                                               : fmt::format("{} = {}{}\n", f.name, value, source);
  }
  return out;
}

}  // namespace trident::train
