// Turning the config into the model's spec, the numerics and the learning-rate schedule (train/setup.h).
#include "trident/train/setup.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>

#include "trident/data/dataset/blended_dataset.h"
#include "trident/data/dataset/gpt_dataset.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/split.h"
#include "trident/core/atomic_file.h"
#include "trident/models/hf.h"
#include "trident/optim/schedule.h"
#include "trident/parallel/pipeline/schedule.h"
#include "trident/train/config/model_options.h"
#include "trident/train/trainer.h"

namespace trident::train {

namespace fs = std::filesystem;

namespace detail {

DType compute_dtype(const std::string& precision) {
  return parse_precision(precision, "train.precision");
}

std::int64_t accumulation_steps(const Config& c, int dp) {
  const std::int64_t per_step = c.train.micro_batch_size * dp;
  const std::int64_t global = c.train.global_batch_size > 0 ? c.train.global_batch_size : per_step;
  return global / per_step;
}

namespace {

// The value config.json gives option `o` (nullopt for a row without a key), as the key would hold it.
std::optional<OptionValue> pretrained_value(const ModelOption& o, const models::TransformerSpec& pretrained) {
  if (!o.record) return std::nullopt;
  ModelConfig held;
  o.record(pretrained, held);
  return o.get(held);
}

std::string pretrained_config_path(const ModelConfig& m) {
  return (fs::path(m.from_pretrained) / "config.json").string();
}

}  // namespace

models::TransformerSpec model_spec(const ModelConfig& m, std::int64_t tokenizer_vocab, std::int64_t seq_len) {
  models::TransformerSpec s;
  if (!m.from_pretrained.empty()) {
    // The pretrained model's config.json decides every value it holds, dropouts included, as in transformers'
    // from_pretrained. What training may change (the options' table marks it: dropout, the vocabulary padding,
    // the initial std of parameters the files lack, the mixture-of-experts loss terms and capacity) a given key
    // overrides; any other key must be unset or say what config.json says (a recorded config.toml does).
    s = models::read_hf_config(pretrained_config_path(m));
    const ModelConfig defaults;
    for (const ModelOption& o : model_options()) {
      if (o.unset == Unset::no_key || o.name.starts_with("from_pretrained")) continue;
      const bool given = m.given.contains(o.name);
      if (o.pretrained_may_set) {
        if (given) o.apply(m, s);
        continue;
      }
      // Unset is the default. A given default is unset too where config.json has no value for the key
      // (model.preset = '') or where it means "the preset's" (a size of 0), but model.arch = 'gpt2' is not.
      const std::optional<OptionValue> value = o.get(m), theirs = pretrained_value(o, s);
      const bool unset = value == o.get(defaults) && (!given || !theirs || o.unset == Unset::keeps);
      if (!value || unset || value == theirs) continue;
      TRIDENT_FAIL("model.{} = {}: model.from_pretrained='{}' fixes the model, and its config.json {}; leave model.{} "
                   "unset",
                   o.name, to_string(*value), m.from_pretrained,
                   theirs ? fmt::format("gives {}", to_string(*theirs)) : std::string("decides it"), o.name);
    }
    s.validate();
    return s;
  }
  if (!m.preset.empty()) {
    s = models::preset(m.preset);
    // model.arch left at its default follows the preset; another family than the preset's is a contradiction.
    TRIDENT_CHECK(m.arch == models::kDefaultFamily || m.arch == s.family, "model.arch '{}' contradicts model.preset '{}' (a {} preset)",
                  m.arch, m.preset, s.family);
  } else {
    s = models::family(m.arch).defaults();
    s.family = m.arch;
  }
  // The keys given, as the options' table says each applies.
  for (const ModelOption& o : model_options()) o.apply(m, s);
  // The sizes whose 0 the family or the run derives.
  s.n_kv_head = m.n_kv_head ? m.n_kv_head : (s.n_kv_head && !m.n_head ? s.n_kv_head : s.n_head);
  if (!s.d_ff || (m.d_model && !m.d_ff)) s.d_ff = models::family(s.family).default_d_ff(s.d_model);
  if (!m.vocab_size && tokenizer_vocab > 0) s.vocab_size = tokenizer_vocab;
  if (s.max_seq_len == 0) s.max_seq_len = seq_len;
  s.validate();
  return s;
}
ModelConfig recorded_pretrained(const ModelConfig& m, const models::TransformerSpec& resolved) {
  ModelConfig out = m;
  const std::string source = pretrained_config_path(m);
  const models::TransformerSpec theirs = models::read_hf_config(source);
  for (const ModelOption& o : model_options()) {
    if (!o.record) continue;
    o.record(resolved, out);
    const std::optional<OptionValue> mine = o.get(out), its = pretrained_value(o, theirs);
    out.origin[o.name] = mine == its ? "from " + source
                                     : fmt::format("given over {}, which says {}", source, its ? to_string(*its) : "");
  }
  return out;
}

models::TransformerSpec with_token_ids(models::TransformerSpec s, const data::Tokenizer& tokenizer) {
  const std::optional<std::int32_t> eod = tokenizer.eod_id();
  if (s.eos_token_ids.empty() && eod) s.eos_token_ids = {*eod};
  if (!s.bos_token_id) {
    const std::vector<std::int32_t>& prefix = tokenizer.parts().prefix_ids;
    if (prefix.size() == 1) {
      s.bos_token_id = prefix[0];
    } else if (models::family(s.family).eod_is_bos && eod) {
      s.bos_token_id = *eod;  // GPT-2's convention: <|endoftext|> begins and ends
    }
  }
  return s;
}

optim::ScheduleOptions schedule_options(const Config& c) {
  optim::ScheduleOptions o;
  o.peak_lr = c.optim.lr;
  o.min_lr = c.schedule.min_lr;
  o.warmup_steps = c.schedule.warmup_steps;
  o.decay_steps = c.schedule.decay_steps > 0 ? c.schedule.decay_steps : c.train.steps;
  o.decay = optim::parse_decay(c.schedule.decay);
  o.wsd_decay_steps = c.schedule.wsd_decay_steps;
  o.wsd_style = optim::parse_wsd_style(c.schedule.wsd_decay_style);
  TRIDENT_CHECK(c.schedule.warmup_type == "linear" || c.schedule.warmup_type == "log",
                "schedule.warmup_type: unknown warmup '{}' (expected linear or log)", c.schedule.warmup_type);
  o.log_warmup = c.schedule.warmup_type == "log";
  o.warmup_min_lr = c.schedule.warmup_min_lr;
  if (o.decay == optim::Decay::deepspeed_warmup_cosine) o.min_lr = c.schedule.min_lr;
  o.cycle_first_step_size = static_cast<double>(c.schedule.cycle_first_step_size);
  o.cycle_second_step_size = static_cast<double>(c.schedule.cycle_second_step_size > 0 ? c.schedule.cycle_second_step_size
                                                                                        : c.schedule.cycle_first_step_size);
  o.cycle_first_stair_count = c.schedule.cycle_first_stair_count;
  o.cycle_second_stair_count =
      c.schedule.cycle_second_stair_count >= 0 ? c.schedule.cycle_second_stair_count : c.schedule.cycle_first_stair_count;
  o.decay_step_size = static_cast<double>(c.schedule.decay_step_size);
  o.decay_lr_rate = c.schedule.decay_lr_rate;
  o.cycle_momentum = c.schedule.cycle_momentum;
  o.cycle_min_mom = c.schedule.cycle_min_mom;
  o.cycle_max_mom = c.schedule.cycle_max_mom;
  o.decay_mom_rate = c.schedule.decay_mom_rate;
  o.lr_range_test_step_size = static_cast<double>(c.schedule.lr_range_test_step_size);
  o.lr_range_test_step_rate = c.schedule.lr_range_test_step_rate;
  o.lr_range_test_staircase = c.schedule.lr_range_test_staircase;
  return o;
}

}  // namespace detail

}  // namespace trident::train
