// Turning the config into the model's spec, the numerics and the learning-rate schedule (train/setup.h).
#include "trident/train/setup.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>

#include "trident/data/dataset/blended_dataset.h"
#include "trident/data/dataset/gpt_dataset.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/split.h"
#include "trident/core/atomic_file.h"
#include "trident/models/hf.h"
#include "trident/optim/schedule.h"
#include "trident/parallel/pipeline/schedule.h"
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

models::TransformerSpec model_spec(const ModelConfig& m, std::int64_t tokenizer_vocab, std::int64_t seq_len) {
  models::TransformerSpec s;
  if (!m.from_pretrained.empty()) {
    // The architecture, sizes and numerics are the pretrained model's config.json's: a model.* key that would
    // be ignored is refused by name. What training may set: dropout, the vocabulary padding, the initial
    // std of parameters the files lack, and the mixture-of-experts loss terms and capacity.
    static const std::set<std::string> settable = {
        "model.from_pretrained",   "model.dropout",         "model.make_vocab_size_divisible_by",
        "model.init_std",          "model.moe_aux_loss_coef", "model.moe_z_loss_coef",
        "model.moe_capacity_factor"};
    Config given, defaults;
    given.model = m;
    for (const ConfigKey& k : config_keys()) {
      if (!k.key.starts_with("model.") || settable.count(k.key)) continue;
      const std::string value = key_value(given, k.key);
      TRIDENT_CHECK(value == key_value(defaults, k.key),
                    "{} = {}: model.from_pretrained='{}' fixes the model (its config.json decides {}); leave it unset",
                    k.key, value, m.from_pretrained, k.key.substr(6));
    }
    s = models::read_hf_config((fs::path(m.from_pretrained) / "config.json").string());
    s.dropout = m.dropout;
    s.vocab_divisible_by = m.make_vocab_size_divisible_by;
    s.init_std = m.init_std;
    if (m.moe_aux_loss_coef) s.moe_aux_loss_coef = *m.moe_aux_loss_coef;
    if (m.moe_z_loss_coef) s.moe_z_loss_coef = *m.moe_z_loss_coef;
    if (m.moe_capacity_factor) s.moe_capacity_factor = *m.moe_capacity_factor;
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
    s.norm_eps = m.norm_eps;
  }
  const models::Family& family = models::family(s.family);
  if (m.tie_embeddings) s.tie_embeddings = *m.tie_embeddings;
  if (m.sliding_window) s.sliding_window = m.sliding_window;
  if (m.type_vocab_size) s.type_vocab_size = m.type_vocab_size;
  if (m.pooler) s.pooler = true;
  if (m.n_experts) s.n_experts = m.n_experts;
  if (m.experts_per_token) s.experts_per_token = m.experts_per_token;
  if (m.moe_aux_loss_coef) s.moe_aux_loss_coef = *m.moe_aux_loss_coef;
  if (m.moe_z_loss_coef) s.moe_z_loss_coef = *m.moe_z_loss_coef;
  if (m.moe_capacity_factor) s.moe_capacity_factor = *m.moe_capacity_factor;
  if (m.moe_d_ff) s.moe_d_ff = m.moe_d_ff;
  if (m.moe_shared_d_ff) s.moe_shared_d_ff = m.moe_shared_d_ff;
  if (m.moe_norm_topk_prob) s.moe_norm_topk_prob = *m.moe_norm_topk_prob;
  if (m.n_layer) s.n_layer = m.n_layer;
  if (m.n_head) s.n_head = m.n_head;
  if (m.d_model) s.d_model = m.d_model;
  s.n_kv_head = m.n_kv_head ? m.n_kv_head : (s.n_kv_head && !m.n_head ? s.n_kv_head : s.n_head);
  if (m.d_ff) s.d_ff = m.d_ff;
  if (!s.d_ff || (m.d_model && !m.d_ff)) s.d_ff = family.default_d_ff(s.d_model);
  if (m.vocab_size) {
    s.vocab_size = m.vocab_size;
  } else if (tokenizer_vocab > 0) {
    s.vocab_size = tokenizer_vocab;
  }
  if (m.max_seq_len) {
    s.max_seq_len = m.max_seq_len;
  } else if (s.max_seq_len == 0) {
    s.max_seq_len = seq_len;
  }
  s.dropout = m.dropout;
  s.vocab_divisible_by = m.make_vocab_size_divisible_by;
  s.rope.theta = m.rope_theta;
  s.init_std = m.init_std;
  if (m.preset.empty()) s.norm_eps = m.norm_eps;
  s.validate();
  return s;
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
  return o;
}

}  // namespace detail

}  // namespace trident::train
