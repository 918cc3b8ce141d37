#include "trident/train/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <toml++/toml.h>
#include <type_traits>

#include "trident/core/error.h"

namespace trident::train {

namespace {

template <typename T>
constexpr const char* type_name() {
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
    TRIDENT_FAIL("{}: key '{}' must be {} {}, got {}", origin, key, article, type, describe_node(node));
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
  if constexpr (std::is_same_v<T, std::string>) {
    std::ostringstream out;
    out << toml::value<std::string>(v);
    return out.str();
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, double>) {
    std::ostringstream out;
    out << toml::value<double>(v);
    return out.str();
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

template <typename S, typename T>
Field field(const char* section, const char* name, S Config::*sec, T S::*member) {
  Field f;
  f.section = section;
  f.name = name;
  f.type = type_name<T>();
  const std::string key = f.key();
  f.set = [sec, member, key](Config& c, const toml::node& node, const std::string& origin) {
    (c.*sec).*member = convert<T>(node, key, origin);
  };
  f.get = [sec, member](const Config& c) { return format_value((c.*sec).*member); };
  return f;
}

const std::vector<Field>& fields() {
  static const std::vector<Field> all = [] {
    std::vector<Field> f;
    using C = Config;
#define MODEL(n) f.push_back(field("model", #n, &C::model, &ModelConfig::n))
    MODEL(arch); MODEL(preset); MODEL(n_layer); MODEL(n_head); MODEL(n_kv_head); MODEL(d_model); MODEL(d_ff);
    MODEL(vocab_size); MODEL(max_seq_len); MODEL(dropout); MODEL(norm_eps); MODEL(rope_theta);
    MODEL(tie_embeddings); MODEL(from_pretrained);
#undef MODEL
#define DATA(n) f.push_back(field("data", #n, &C::data, &DataConfig::n))
    DATA(tokenizer); DATA(paths); DATA(weights); DATA(split); DATA(valid_paths); DATA(cache_dir); DATA(prefetch);
#undef DATA
#define TRAIN(n) f.push_back(field("train", #n, &C::train, &TrainConfig::n))
    TRAIN(seq_len); TRAIN(micro_batch_size); TRAIN(global_batch_size); TRAIN(steps); TRAIN(seed);
    TRAIN(precision); TRAIN(log_interval); TRAIN(eval_interval); TRAIN(eval_steps);
    TRAIN(activation_checkpointing); TRAIN(peak_gflops); TRAIN(device); TRAIN(threads);
#undef TRAIN
#define OPTIM(n) f.push_back(field("optim", #n, &C::optim, &OptimConfig::n))
    OPTIM(name); OPTIM(lr); OPTIM(betas); OPTIM(eps); OPTIM(weight_decay); OPTIM(momentum); OPTIM(clip_grad);
    OPTIM(initial_loss_scale);
#undef OPTIM
#define SCHEDULE(n) f.push_back(field("schedule", #n, &C::schedule, &ScheduleConfig::n))
    SCHEDULE(warmup_steps); SCHEDULE(decay); SCHEDULE(decay_steps); SCHEDULE(min_lr);
#undef SCHEDULE
#define DIST(n) f.push_back(field("dist", #n, &C::dist, &DistConfig::n))
    DIST(data_parallel_size); DIST(tensor_parallel_size); DIST(pipeline_parallel_size); DIST(pipeline_num_layers);
    DIST(virtual_pipeline_size); DIST(pipeline_schedule); DIST(sequence_parallel); DIST(zero_stage);
    DIST(timeout_s);
#undef DIST
#define CKPT(n) f.push_back(field("checkpoint", #n, &C::checkpoint, &CheckpointConfig::n))
    CKPT(dir); CKPT(interval); CKPT(keep); CKPT(resume);
#undef CKPT
#define LOG(n) f.push_back(field("log", #n, &C::log, &LogConfig::n))
    LOG(progress); LOG(metrics_file);
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

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& origin) {
  const std::string near = nearest_key(key);
  if (!near.empty()) TRIDENT_FAIL("{}: unknown key '{}' (did you mean '{}'?)", origin, key, near);
  TRIDENT_FAIL("{}: unknown key '{}' (see `trident train --help-config` for the known keys)", origin, key);
}

void apply_table(Config& config, const toml::table& table, const std::string& prefix, const std::string& origin) {
  for (const auto& [k, node] : table) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    const Field* f = find_field(key);
    if (const toml::table* sub = node.as_table(); sub && !f) {
      // A table is a section only at the top level; deeper tables are unknown
      // keys, unless they name a key (then convert() reports the wrong type).
      bool is_section = prefix.empty() && std::any_of(fields().begin(), fields().end(),
                                                       [&](const Field& g) { return g.section == key; });
      if (!is_section) unknown_key(key, origin);
      apply_table(config, *sub, key, origin);
      continue;
    }
    if (!f) unknown_key(key, origin);
    f->set(config, node, origin);
  }
}

}  // namespace

std::vector<ConfigKey> config_keys() {
  std::vector<ConfigKey> out;
  for (const Field& f : fields()) out.push_back({f.key(), f.type});
  return out;
}

std::string nearest_key(const std::string& key) {
  std::string best;
  std::size_t best_d = std::string::npos;
  for (const Field& f : fields()) {
    // Compare against the full key and, for a missing or wrong section, the bare name.
    std::size_t d = edit_distance(key, f.key());
    const auto dot = key.rfind('.');
    const std::string bare = dot == std::string::npos ? key : key.substr(dot + 1);
    d = std::min(d, edit_distance(bare, f.name) + 1);
    if (d < best_d) {
      best_d = d;
      best = f.key();
    }
  }
  return best_d <= std::max<std::size_t>(3, key.size() / 3) ? best : std::string();
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
  std::ifstream in(path);
  TRIDENT_CHECK(in.good(), "cannot read config file '{}'", path);
  std::stringstream buf;
  buf << in.rdbuf();
  apply_toml(config, buf.str(), path);
}

void apply_override(Config& config, const std::string& assignment) {
  const auto eq = assignment.find('=');
  TRIDENT_CHECK(eq != std::string::npos && eq > 0, "--set '{}': expected section.key=value", assignment);
  const std::string key = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);
  const std::string origin = fmt::format("--set {}", assignment);
  const Field* f = find_field(key);
  if (!f) unknown_key(key, origin);
  toml::table parsed;
  bool ok = true;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    ok = false;
  }
  if (!ok || (f->type == "string" && !parsed["v"].is_string())) {
    // A bare word (--set train.precision=bf16) is a string.
    parsed = toml::table{{"v", value}};
  }
  f->set(config, *parsed.get("v"), origin);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Config config;
  if (!path.empty()) apply_file(config, path);
  for (const auto& o : overrides) apply_override(config, o);
  return config;
}

std::string to_toml(const Config& config) {
  std::string out;
  std::string section;
  for (const Field& f : fields()) {
    if (f.section != section) {
      section = f.section;
      out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", section);
    }
    out += fmt::format("{} = {}\n", f.name, f.get(config));
  }
  return out;
}

}  // namespace trident::train
