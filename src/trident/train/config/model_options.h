// The model options: one row per TransformerSpec field that a model.* key sets or that a resume must match
// (docs/architecture.md, "Adding a model option"). Everything about a model key is read from its row:
// the key and its TOML value (config.cpp), the spec a run builds (detail::model_spec: preset, then the
// keys, then what the family derives), the keys model.from_pretrained refuses, and the resume's check
// that a checkpoint holds the configured model (run_checkpoint.cpp); the planner builds its spec the same way.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "trident/models/spec.h"
#include "trident/train/config/config.h"
#include "trident/train/config/config_domain.h"

namespace trident::train {

// What a model option's key means when it is left at its default.
enum class Unset {
  keeps,                   // 0 (false): the preset's or the family's value stays
  absent,                  // only a given key sets the field; unset, the preset's or the family's value stays
  is_value,                // never unset: the key's value (by default the field's default) is the spec's
  is_value_unless_preset,  // the key's value, unless model.preset gives the field (norm_eps)
  chooses,                 // arch, preset, from_pretrained: which spec the other keys apply to
  no_key,                  // no key: the field is config.json's alone (q/k/v biases, RoPE's scaling)
};

// A model key's value, in the type of its field (and of its TOML value).
using OptionValue = std::variant<std::int64_t, double, bool, std::string, std::vector<std::int64_t>>;
std::string to_string(const OptionValue& value);

struct ModelOption {
  std::string name;          // the key is model.<name>; a resume's refusal names it so
  Unset unset = Unset::keeps;
  Domain domain = kAny;      // the values the key accepts
  const char* meaning = "";  // completes the domain's words in an error: " (0 = n_head)"
  // model.from_pretrained may set it; else the pretrained config.json decides, and the key must stay unset.
  bool pretrained_may_set = false;
  // A resume (and a new run over a directory's checkpoints) must have the checkpoint's value.
  bool resume_must_match = false;
  OptionValue initial;       // the key's default, of the key's type
  // The key's value in a configuration; nullopt for an absent key that was not given.
  std::function<std::optional<OptionValue>(const ModelConfig&)> get;
  std::function<void(ModelConfig&, const OptionValue&)> set;
  // Puts the key's value into `spec` as `unset` says (nothing for chooses and no_key).
  std::function<void(const ModelConfig&, models::TransformerSpec&)> apply;
  // What a resume compares (set when resume_must_match).
  std::function<OptionValue(const models::TransformerSpec&)> compared;
  // Puts a resolved spec's value into the key, as given (null for preset, from_pretrained and no_key rows):
  // a model.from_pretrained run records its config.json's values in its config.toml.
  std::function<void(const models::TransformerSpec&, ModelConfig&)> record;
};

// Every option, in the order of the keys in `--help-config` and config.toml (no_key rows last).
const std::vector<ModelOption>& model_options();

}  // namespace trident::train
