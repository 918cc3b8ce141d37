// The table of model options (train/config/model_options.h). Adding an option is a field in models/spec.h and one
// row here (docs/architecture.md, "Adding a model option").
#include "trident/train/config/model_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <type_traits>
#include <utility>

namespace trident::train {

std::string to_string(const OptionValue& value) {
  return std::visit([](const auto& v) { return fmt::format("{}", v); }, value);
}

namespace {

using models::TransformerSpec;

// model.from_pretrained may set the option, or its config.json decides it.
constexpr bool kSettable = true, kFixed = false;
// A resume must match the option, or may change it.
constexpr bool kMatched = true, kFree = false;

// The field at `path` of a spec, or of a configuration (ModelConfig holds its options in the same fields).
#define FIELD(path) [](auto& s) -> auto& { return s.path; }

// A row's description; the functions are the caller's to set.
ModelOption row(const char* name, Unset unset, Domain domain, const char* meaning, bool pretrained, bool resume,
                OptionValue initial) {
  return ModelOption{name, unset, domain, meaning, pretrained, resume, std::move(initial), {}, {}, {}, {}, {}};
}

// An option held in the TransformerSpec field `at` gives.
template <typename At>
ModelOption option(const char* name, At at, Unset unset, Domain domain, const char* meaning, bool pretrained,
                   bool resume) {
  using T = std::decay_t<decltype(at(std::declval<TransformerSpec&>()))>;
  TransformerSpec defaults;
  ModelOption o =
      row(name, unset, domain, meaning, pretrained, resume, OptionValue{std::in_place_type<T>, at(defaults)});
  o.get = [at, unset, key = o.name](const ModelConfig& m) -> std::optional<OptionValue> {
    if (unset == Unset::absent && !m.given.contains(key)) return std::nullopt;
    return OptionValue{std::in_place_type<T>, at(m)};
  };
  o.set = [at, key = o.name](ModelConfig& m, const OptionValue& value) {
    at(m) = std::get<T>(value);
    m.given.insert(key);
  };
  o.record = [at, key = o.name](const TransformerSpec& s, ModelConfig& m) {
    at(m) = at(s);
    m.given.insert(key);
  };
  o.apply = [at, unset, key = o.name](const ModelConfig& m, TransformerSpec& s) {
    switch (unset) {
      case Unset::keeps:
        if (at(m) != T{}) at(s) = at(m);
        break;
      case Unset::absent:
        if (m.given.contains(key)) at(s) = at(m);
        break;
      case Unset::is_value:
        at(s) = at(m);
        break;
      case Unset::is_value_unless_preset:
        if (m.preset.empty()) at(s) = at(m);
        break;
      case Unset::chooses:
      case Unset::no_key:
        break;
    }
  };
  if (resume) o.compared = [at](const TransformerSpec& s) { return OptionValue{std::in_place_type<T>, at(s)}; };
  return o;
}

// `o`, which a resume must match, comparing what `compared` reads instead of the field.
ModelOption compared_as(ModelOption o, std::function<OptionValue(const TransformerSpec&)> compared) {
  o.resume_must_match = true;
  o.compared = std::move(compared);
  return o;
}

// A key that chooses the spec the options apply to, or how it is loaded, held in the configuration's own
// `member`.
template <typename T>
ModelOption choice(const char* name, T ModelConfig::*member, bool pretrained) {
  ModelOption o = row(name, Unset::chooses, kAny, "", pretrained, kFree, OptionValue{ModelConfig{}.*member});
  o.get = [member](const ModelConfig& m) -> std::optional<OptionValue> { return OptionValue{m.*member}; };
  o.set = [member, key = o.name](ModelConfig& m, const OptionValue& value) {
    m.*member = std::get<T>(value);
    m.given.insert(key);
  };
  o.apply = [](const ModelConfig&, TransformerSpec&) {};
  return o;
}

// model.arch, which holds the spec's family.
ModelOption recorded_as_family(ModelOption o) {
  o.record = [](const TransformerSpec& s, ModelConfig& m) {
    m.arch = s.family;
    m.given.insert("arch");
  };
  return o;
}

// A field that config.json alone sets (no key, so no get or set), which a resume must match: `at` reads it.
template <typename At>
ModelOption from_config_json(const char* name, At at) {
  using T = std::decay_t<decltype(at(std::declval<const TransformerSpec&>()))>;
  const TransformerSpec defaults{};
  ModelOption o =
      row(name, Unset::no_key, kAny, "", kFixed, kMatched, OptionValue{std::in_place_type<T>, at(defaults)});
  o.apply = [](const ModelConfig&, TransformerSpec&) {};
  o.compared = [at](const TransformerSpec& s) { return OptionValue{std::in_place_type<T>, at(s)}; };
  return o;
}

std::vector<ModelOption> make_options() {
  const char* preset_or_default = " (0 = the preset's or the default)";
  const char* preset_or_family = " (0 = the preset's or the family's)";
  using U = Unset;
  return {
      // model.arch left at its default follows model.preset (detail::model_spec); a resume compares the family.
      recorded_as_family(compared_as(choice("arch", &ModelConfig::arch, kFixed),
                                     [](const TransformerSpec& s) { return OptionValue{s.family}; })),
      choice("preset", &ModelConfig::preset, kFixed),
      option("n_layer", FIELD(n_layer), U::keeps, kNonNegative, preset_or_default, kFixed, kMatched),
      option("n_head", FIELD(n_head), U::keeps, kNonNegative, preset_or_default, kFixed, kMatched),
      // 0: n_head, or the preset's when model.n_head is not set either (detail::model_spec).
      option("n_kv_head", FIELD(n_kv_head), U::keeps, kNonNegative, " (0 = n_head)", kFixed, kMatched),
      option("d_model", FIELD(d_model), U::keeps, kNonNegative, preset_or_default, kFixed, kMatched),
      // 0: the preset's, or the family's default_d_ff of d_model (also when only model.d_model is given).
      option("d_ff", FIELD(d_ff), U::keeps, kNonNegative, preset_or_default, kFixed, kMatched),
      option("vocab_size", FIELD(vocab_size), U::keeps, kNonNegative, " (0 = the tokenizer's)", kFixed, kMatched),
      option("make_vocab_size_divisible_by", FIELD(vocab_divisible_by), U::is_value, kAtLeastOne, "", kSettable,
             kFree),
      // 0: the preset's, else train.seq_len.
      option("max_seq_len", FIELD(max_seq_len), U::keeps, kNonNegative, preset_or_default, kFixed, kMatched),
      option("dropout", FIELD(dropout), U::is_value, kFraction, "", kSettable, kFree),
      // Unset: the preset's (0) or config.json's (BERT's attention_probs_dropout_prob, GPT-2's attn_pdrop,
      // the LLaMA-shaped families' attention_dropout).
      option("attention_dropout", FIELD(attention_dropout), U::absent, kFraction, "", kSettable, kFree),
      option("norm_eps", FIELD(norm_eps), U::is_value_unless_preset, kNonNegativeFinite, "", kFixed, kMatched),
      option("rope_theta", FIELD(rope.theta), U::is_value, kPositiveFinite, "", kFixed, kMatched),
      option("tie_embeddings", FIELD(tie_embeddings), U::absent, kAny, "", kFixed, kMatched),
      choice("from_pretrained", &ModelConfig::from_pretrained, kSettable),
      // true: tensors of from_pretrained's files that the model does not use are refused, not named in a warning.
      choice("from_pretrained_strict", &ModelConfig::from_pretrained_strict, kSettable),
      option("sliding_window", FIELD(sliding_window), U::keeps, kNonNegative, " (0 = the preset's or none)", kFixed,
             kMatched),
      option("type_vocab_size", FIELD(type_vocab_size), U::keeps, kNonNegative, preset_or_family, kFixed, kMatched),
      option("pooler", FIELD(pooler), U::keeps, kAny, "", kFixed, kMatched),
      // Block-sparse attention, DeepSpeed's sparse_attention section ([model.sparse_attention] in TOML).
      option("sparse_attention.mode", FIELD(sparse_attention.mode), U::absent, kAny, " (\"\" = dense attention)",
             kSettable, kMatched),
      option("sparse_attention.block", FIELD(sparse_attention.block), U::absent, kPositive, "", kSettable, kMatched),
      option("sparse_attention.different_layout_per_head", FIELD(sparse_attention.different_layout_per_head),
             U::absent, kAny, "", kSettable, kMatched),
      option("sparse_attention.num_local_blocks", FIELD(sparse_attention.num_local_blocks), U::absent, kPositive, "",
             kSettable, kMatched),
      option("sparse_attention.num_global_blocks", FIELD(sparse_attention.num_global_blocks), U::absent,
             kNonNegative, "", kSettable, kMatched),
      option("sparse_attention.attention", FIELD(sparse_attention.attention), U::absent, kAny, "", kSettable,
             kMatched),
      option("sparse_attention.horizontal_global_attention", FIELD(sparse_attention.horizontal_global_attention),
             U::absent, kAny, "", kSettable, kMatched),
      option("sparse_attention.num_different_global_patterns",
             FIELD(sparse_attention.num_different_global_patterns), U::absent, kPositive, "", kSettable, kMatched),
      option("sparse_attention.num_random_blocks", FIELD(sparse_attention.num_random_blocks), U::absent,
             kNonNegative, "", kSettable, kMatched),
      option("sparse_attention.local_window_blocks", FIELD(sparse_attention.local_window_blocks), U::absent,
             kPositive, "", kSettable, kMatched),
      option("sparse_attention.global_block_indices", FIELD(sparse_attention.global_block_indices), U::absent,
             kNonNegative, "", kSettable, kMatched),
      option("sparse_attention.global_block_end_indices", FIELD(sparse_attention.global_block_end_indices),
             U::absent, kPositive, "", kSettable, kMatched),
      option("sparse_attention.num_sliding_window_blocks", FIELD(sparse_attention.num_sliding_window_blocks),
             U::absent, kNonNegative, "", kSettable, kMatched),
      option("sparse_attention.seed", FIELD(sparse_attention.seed), U::absent, kNonNegative,
             " (the random blocks' stream)", kSettable, kMatched),
      option("n_experts", FIELD(n_experts), U::keeps, kNonNegative, preset_or_family, kFixed, kMatched),
      option("experts_per_token", FIELD(experts_per_token), U::keeps, kNonNegative, preset_or_family, kFixed,
             kMatched),
      option("moe_aux_loss_coef", FIELD(moe_aux_loss_coef), U::absent, kNonNegativeFinite, "", kSettable, kFree),
      option("moe_z_loss_coef", FIELD(moe_z_loss_coef), U::absent, kNonNegativeFinite, "", kSettable, kFree),
      option("moe_capacity_factor", FIELD(moe_capacity_factor), U::absent, kNonNegativeFinite, " (0 = dropless)",
             kSettable, kFree),
      // A resume compares the experts' width, which 0 leaves at d_ff.
      compared_as(option("moe_d_ff", FIELD(moe_d_ff), U::keeps, kNonNegative, " (0 = the preset's, or d_ff)", kFixed,
                         kMatched),
                  [](const TransformerSpec& s) { return OptionValue{s.expert_d_ff()}; }),
      option("moe_shared_d_ff", FIELD(moe_shared_d_ff), U::keeps, kNonNegative, " (0 = the preset's)", kFixed,
             kMatched),
      option("moe_norm_topk_prob", FIELD(moe_norm_topk_prob), U::absent, kAny, "", kFixed, kMatched),
      option("init_std", FIELD(init_std), U::is_value, kPositiveFinite, "", kSettable, kFree),
      // config.json's alone: a resume of a fine-tuning run whose source config.json changed since must not
      // continue with other biases or another RoPE scaling.
      from_config_json("qkv_bias", FIELD(qkv_bias)),
      from_config_json("rope_scaling (0 none, 1 linear, 2 llama3)",
                       [](const TransformerSpec& s) { return static_cast<std::int64_t>(s.rope.scaling); }),
      from_config_json("rope_scaling.factor", FIELD(rope.factor)),
      from_config_json("rope_scaling.low_freq_factor", FIELD(rope.low_freq_factor)),
      from_config_json("rope_scaling.high_freq_factor", FIELD(rope.high_freq_factor)),
      from_config_json("rope_scaling.original_max_position_embeddings", FIELD(rope.original_max_position)),
  };
}

#undef FIELD

}  // namespace

const std::vector<ModelOption>& model_options() {
  static const std::vector<ModelOption> all = make_options();
  return all;
}

}  // namespace trident::train
