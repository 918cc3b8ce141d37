// The config's cross-field checks before any work starts (train/setup.h).
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
#include "trident/optim/registry.h"
#include "trident/optim/schedule.h"
#include "trident/parallel/pipeline/schedule.h"
#include "trident/train/trainer.h"

namespace trident::train {

namespace fs = std::filesystem;

namespace {

// The model's layer count as configured (0 when the config leaves it to later checks).
std::int64_t configured_layers(const ModelConfig& m) {
  if (!m.from_pretrained.empty())
    return models::read_hf_config((fs::path(m.from_pretrained) / "config.json").string()).n_layer;
  if (m.n_layer > 0) return m.n_layer;
  return m.preset.empty() ? 0 : models::preset(m.preset).n_layer;
}

// The configured model's blocks are mixtures of experts.
// The configured model's family: the pretrained config.json's, the preset's, or model.arch.
std::string configured_family(const ModelConfig& m) {
  if (!m.from_pretrained.empty())
    return models::read_hf_config((fs::path(m.from_pretrained) / "config.json").string()).family;
  return m.preset.empty() ? m.arch : models::preset(m.preset).family;
}

bool configured_moe(const ModelConfig& m) {
  if (!m.from_pretrained.empty())
    return models::read_hf_config((fs::path(m.from_pretrained) / "config.json").string()).n_experts > 0;
  return models::family(configured_family(m)).moe;
}

// The pipeline keys, once the data-parallel size is known (micro-batches per step).
void validate_pipeline(const Config& c, int dp) {
  const std::int64_t pp = c.dist.pipeline_parallel_size, v = c.dist.virtual_pipeline_size;
  const auto schedule = parallel::pipeline::parse_schedule(c.dist.pipeline_schedule);
  TRIDENT_CHECK(v >= 1, "dist.virtual_pipeline_size must be at least 1, got {}", v);
  if (pp == 1) {
    TRIDENT_CHECK(v == 1,
                  "dist.virtual_pipeline_size={} splits each pipeline rank's layers into chunks; it needs "
                  "dist.pipeline_parallel_size of at least 2",
                  v);
    TRIDENT_CHECK(c.dist.pipeline_num_layers.empty(),
                  "dist.pipeline_num_layers is set but dist.pipeline_parallel_size=1 (there is one stage)");
    return;
  }
  // DeepSpeed and Megatron make the same choice: under a pipeline schedule the
  // micro-batches' backwards interleave with forwards, so ZeRO-2 would
  // reduce-scatter every gradient once per micro-batch (m times the traffic of
  // one reduction at the end) and ZeRO-3 would re-gather every stage's weights
  // for each forward and backward of each micro-batch.
  TRIDENT_CHECK(c.dist.zero_stage <= 1,
                "dist.zero_stage={} with dist.pipeline_parallel_size={}: ZeRO-2/3 partition gradients (and ZeRO-3 "
                "weights) per micro-batch, which a pipeline schedule would repeat for every one of its micro-batches; "
                "use dist.zero_stage=1 (optimizer state partitioned, gradients reduced once per step) or 0",
                c.dist.zero_stage, pp);
  TRIDENT_CHECK(
      c.dist.pipeline_num_layers.empty() || static_cast<std::int64_t>(c.dist.pipeline_num_layers.size()) == pp * v,
      "dist.pipeline_num_layers has {} entries but there are {} {} (one count per {})",
      c.dist.pipeline_num_layers.size(), pp * v,
      v > 1 ? "virtual pipeline stages (pipeline_parallel_size × virtual_pipeline_size)" : "pipeline stages",
      v > 1 ? "model chunk, in virtual-stage order" : "stage");
  if (const std::int64_t layers = configured_layers(c.model); layers > 0) {
    (void)models::partition_layers(layers, static_cast<int>(pp * v), c.dist.pipeline_num_layers);
  }
  const std::int64_t global = c.train.global_batch_size > 0 ? c.train.global_batch_size : c.train.micro_batch_size * dp;
  const std::int64_t micro_batches = global / (c.train.micro_batch_size * dp);
  // A schedule counts micro-batches in an int: a larger count must not wrap to 0 or a negative number.
  TRIDENT_CHECK(micro_batches <= std::numeric_limits<int>::max(),
                "train.global_batch_size={} means {} micro-batches per pipeline step, more than a schedule holds ({})",
                c.train.global_batch_size, micro_batches, std::numeric_limits<int>::max());
  parallel::pipeline::validate(schedule, parallel::pipeline::ScheduleOptions{static_cast<int>(pp),
                                                                             static_cast<int>(micro_batches),
                                                                             static_cast<int>(v)});
}

// Expert parallelism: experts split over data-parallel ranks, of a mixture-of-experts model.
void validate_experts(const Config& c, std::int64_t dp, std::int64_t tp) {
  const std::int64_t ep = c.dist.expert_parallel_size;
  const bool moe = configured_moe(c.model);
  const std::string arch = configured_family(c.model);
  TRIDENT_CHECK(moe || ep == 1,
                "dist.expert_parallel_size={} splits the experts of a mixture of experts, but model.arch={} has none "
                "(use 1, or a mixture-of-experts family: mixtral, qwen2_moe)",
                ep, arch);
  TRIDENT_CHECK(dp % ep == 0,
                "dist.expert_parallel_size={} must divide the data-parallel size {} (experts are split over "
                "data-parallel ranks; the data-parallel size is the world over tensor × pipeline parallel ranks)",
                ep, dp);
  TRIDENT_CHECK(ep == 1 || c.dist.zero_stage <= 1,
                "dist.zero_stage={} with dist.expert_parallel_size={}: experts are partitioned over their own "
                "replicas with ZeRO-1 only; use dist.zero_stage=1 or 0",
                c.dist.zero_stage, ep);
  TRIDENT_CHECK(!moe || tp == 1 || !c.dist.sequence_parallel,
                "dist.sequence_parallel with model.arch={}: mixture-of-experts layers run on the whole sequence of "
                "each tensor-parallel rank; set dist.sequence_parallel=false",
                arch);
}

}  // namespace

namespace {

// checkpoint.keep_best, checkpoint.monitor and early stopping: a known metric, and evaluations to watch.
void validate_monitoring(const Config& c) {
  TRIDENT_CHECK(c.checkpoint.monitor == "val_loss" || c.checkpoint.monitor == "val_ppl",
                "checkpoint.monitor='{}' is not a metric trident records: expected val_loss or val_ppl "
                "(lower is better)",
                c.checkpoint.monitor);
  const bool watched = c.checkpoint.keep_best > 0 || c.train.early_stopping_patience > 0;
  TRIDENT_CHECK(!watched || c.train.eval_interval > 0,
                "{}={} compares {} at evaluations, but train.eval_interval=0 never evaluates: set train.eval_interval "
                "(with checkpoint.keep_best, each evaluated step is also saved)",
                c.checkpoint.keep_best > 0 ? "checkpoint.keep_best" : "train.early_stopping_patience",
                c.checkpoint.keep_best > 0 ? c.checkpoint.keep_best : c.train.early_stopping_patience,
                c.checkpoint.monitor);
}

}  // namespace

void validate_layout(const Config& c, int world_size) {
  (void)detail::compute_dtype(c.train.precision);
  TRIDENT_CHECK(c.train.seq_len > 0, "train.seq_len must be positive, got {}", c.train.seq_len);
  TRIDENT_CHECK(c.train.micro_batch_size > 0, "train.micro_batch_size must be positive, got {}",
                c.train.micro_batch_size);
  const std::int64_t tp = c.dist.tensor_parallel_size, pp = c.dist.pipeline_parallel_size;
  const std::int64_t cp = c.dist.context_parallel_size;
  TRIDENT_CHECK(tp >= 1 && pp >= 1 && cp >= 1,
                "dist.tensor_parallel_size, pipeline_parallel_size and context_parallel_size must be at least 1 (got "
                "{}, {} and {})",
                tp, pp, cp);
  TRIDENT_CHECK((tp & (tp - 1)) == 0, "dist.tensor_parallel_size must be a power of two, got {}", tp);
  TRIDENT_CHECK(!c.dist.sequence_parallel || tp == 1 || c.train.seq_len % tp == 0,
                "dist.sequence_parallel splits the sequence over the tensor-parallel ranks: train.seq_len={} must be a "
                "multiple of dist.tensor_parallel_size={}",
                c.train.seq_len, tp);
  TRIDENT_CHECK(c.dist.context_parallel_algorithm == "ring" || c.dist.context_parallel_algorithm == "all_to_all",
                "dist.context_parallel_algorithm='{}' is not one of ring, all_to_all", c.dist.context_parallel_algorithm);
  TRIDENT_CHECK(cp == 1 || (cp <= c.train.seq_len && c.train.seq_len % (2 * cp) == 0),
                "dist.context_parallel_size={} splits each sequence into 2·{} = {} chunks (two per rank, for the causal "
                "load balance): train.seq_len={} must be a multiple of {}",
                cp, cp, 2 * cp, c.train.seq_len, 2 * cp);
  TRIDENT_CHECK(!c.dist.sequence_parallel || tp == 1 || (c.train.seq_len / cp) % tp == 0,
                "dist.sequence_parallel splits each context-parallel rank's {} tokens (train.seq_len={} over "
                "dist.context_parallel_size={}) over the tensor-parallel ranks: they must be a multiple of "
                "dist.tensor_parallel_size={}",
                c.train.seq_len / cp, c.train.seq_len, cp, tp);
  // Bounded before they are multiplied: a product that wraps around (to 0, or to a divisor of the world size)
  // would divide by zero or pass for a layout of that size.
  TRIDENT_CHECK(tp <= world_size && pp <= world_size && cp <= world_size && tp * pp <= world_size &&
                    tp * pp * cp <= world_size,
                "dist: tensor_parallel_size × pipeline_parallel_size × context_parallel_size = {} × {} × {} is more "
                "than the job's {} rank(s)",
                tp, pp, cp, world_size);
  const std::int64_t tpc = tp * pp * cp;
  TRIDENT_CHECK(world_size % tpc == 0, "dist: tp × pp × cp = {} does not divide the {} ranks of the job", tpc,
                world_size);
  const std::int64_t dp = c.dist.data_parallel_size ? c.dist.data_parallel_size : world_size / tpc;
  TRIDENT_CHECK(dp >= 1 && dp <= world_size, "dist.data_parallel_size={} must be between 1 and the job's {} rank(s)",
                dp, world_size);
  TRIDENT_CHECK(dp * tpc == world_size,
                "dist: data_parallel_size × tensor_parallel_size × pipeline_parallel_size × context_parallel_size = "
                "{} × {} × {} × {} = {}, but the job has {} rank(s)",
                dp, tp, pp, cp, dp * tpc, world_size);
  TRIDENT_CHECK(c.dist.zero_stage >= 0 && c.dist.zero_stage <= 3, "dist.zero_stage must be 0, 1, 2 or 3, got {}",
                c.dist.zero_stage);
  TRIDENT_CHECK(c.dist.timeout_s > 0, "dist.timeout_s must be positive, got {}", c.dist.timeout_s);
  TRIDENT_CHECK(c.train.micro_batch_size <= std::numeric_limits<std::int64_t>::max() / dp,
                "train.micro_batch_size={} × data_parallel_size={} overflows a 64-bit integer",
                c.train.micro_batch_size, dp);
  const std::int64_t per_step = c.train.micro_batch_size * dp;
  if (c.train.global_batch_size > 0) {
    TRIDENT_CHECK(c.train.global_batch_size % per_step == 0,
                  "train.global_batch_size={} must be a multiple of micro_batch_size × data_parallel_size = {} × {} "
                  "= {}",
                  c.train.global_batch_size, c.train.micro_batch_size, dp, per_step);
  }
  validate_pipeline(c, static_cast<int>(dp));
  validate_experts(c, dp, tp);
}

void validate_config(const Config& c, int world_size) {
  (void)detail::compute_dtype(c.train.precision);
  TRIDENT_CHECK(c.train.seq_len > 0, "train.seq_len must be positive, got {}", c.train.seq_len);
  TRIDENT_CHECK(c.train.micro_batch_size > 0, "train.micro_batch_size must be positive, got {}",
                c.train.micro_batch_size);
  TRIDENT_CHECK(c.train.steps > 0, "train.steps must be positive, got {}", c.train.steps);
  TRIDENT_CHECK(c.train.log_interval > 0, "train.log_interval must be positive, got {}", c.train.log_interval);
  validate_layout(c, world_size);
  (void)optim::optimizer_def(c.optim.name);  // a registered optimizer
  TRIDENT_CHECK(c.optim.betas.size() == 2, "optim.betas must hold two numbers, got {}", c.optim.betas.size());
  TRIDENT_CHECK(c.optim.lr > 0, "optim.lr must be positive, got {}", c.optim.lr);
  // The decay goes from optim.lr down to schedule.min_lr: a floor above the peak would climb instead.
  TRIDENT_CHECK(c.schedule.min_lr <= c.optim.lr,
                "schedule.min_lr={} is above optim.lr={}: the learning rate decays from optim.lr down to min_lr "
                "(DeepSpeed's cos_min_ratio must be at most 1)",
                c.schedule.min_lr, c.optim.lr);
  const optim::ScheduleOptions schedule = detail::schedule_options(c);
  if (schedule.decay == optim::Decay::wsd) {
    TRIDENT_CHECK(schedule.decay_steps > c.schedule.warmup_steps,
                  "schedule.decay = \"wsd\" needs steps after the warmup: schedule.warmup_steps={} is not less than "
                  "the {} decay steps ({})",
                  c.schedule.warmup_steps, schedule.decay_steps,
                  c.schedule.decay_steps > 0 ? "schedule.decay_steps" : "schedule.decay_steps=0, so train.steps");
    TRIDENT_CHECK(
        c.schedule.wsd_decay_steps > 0 && c.schedule.wsd_decay_steps <= schedule.decay_steps - c.schedule.warmup_steps,
        "schedule.wsd_decay_steps={} must be in [1, {}] with schedule.decay = \"wsd\" (the decay steps "
        "after schedule.warmup_steps={})",
        c.schedule.wsd_decay_steps, schedule.decay_steps - c.schedule.warmup_steps, c.schedule.warmup_steps);
  }
  if (schedule.log_warmup) {
    TRIDENT_CHECK(optim::is_deepspeed(schedule.decay),
                  "schedule.warmup_type = \"log\" shapes the deepspeed_* decays only (trident's own warmup is linear); "
                  "schedule.decay is \"{}\"",
                  c.schedule.decay);
  }
  if (schedule.decay == optim::Decay::deepspeed_warmup || schedule.decay == optim::Decay::deepspeed_warmup_decay ||
      schedule.decay == optim::Decay::deepspeed_warmup_cosine) {
    // DeepSpeed's warmup schedulers refuse warmup_num_steps <= 0 (ValueError).
    TRIDENT_CHECK(c.schedule.warmup_steps > 0, "schedule.warmup_steps must be positive with schedule.decay = \"{}\" "
                  "(DeepSpeed's warmup_num_steps), got {}", c.schedule.decay, c.schedule.warmup_steps);
  }
  TRIDENT_CHECK(c.schedule.cycle_second_stair_count >= -1,
                "schedule.cycle_second_stair_count must be -1 (= cycle_first_stair_count) or more, got {}",
                c.schedule.cycle_second_stair_count);
  if (const auto betas = optim::cycled_betas(schedule, c.train.steps); betas && betas->first >= 1) {
    TRIDENT_FAIL("schedule.decay_mom_rate={} lifts the cycled momentum to {} by step {}: beta1 must stay below 1",
                 c.schedule.decay_mom_rate, betas->first, c.train.steps);
  }
  TRIDENT_CHECK(c.dist.gradient_reduce == "mean" || c.dist.gradient_reduce == "sum",
                "dist.gradient_reduce: unknown reduction '{}' (expected mean or sum)", c.dist.gradient_reduce);
  validate_monitoring(c);
  detail::check_data_paths(c);
  TRIDENT_CHECK(c.data.weights.empty() || c.data.weights.size() == c.data.paths.size(),
                "data.weights has {} entries for {} data.paths", c.data.weights.size(), c.data.paths.size());
  double weight_sum = 0;
  for (double w : c.data.weights) {
    TRIDENT_CHECK(std::isfinite(w) && w >= 0, "data.weights: {} is not a weight (expected a finite number >= 0)", w);
    weight_sum += w;
  }
  TRIDENT_CHECK(c.data.weights.empty() || weight_sum > 0,
                "data.weights are all 0: at least one dataset must be drawn from");
  TRIDENT_CHECK(!c.model.sparse_attention.active() || !c.data.reset_attention_mask,
                "model.sparse_attention with data.reset_attention_mask: block-sparse attention and packed documents' "
                "masks do not combine; use one or the other");
  TRIDENT_CHECK(!c.data.tokenizer.empty(), "data.tokenizer is empty: give the tokenizer.json the data was made with");
  TRIDENT_CHECK(fs::exists(c.data.tokenizer), "data.tokenizer: '{}' does not exist", c.data.tokenizer);
  (void)training_device(c);
}

namespace detail {

models::Objective configured_objective(const Config& c) { return models::family(configured_family(c.model)).objective; }

void check_data_paths(const Config& c) {
  TRIDENT_CHECK(!c.data.paths.empty(), "data.paths is empty: give at least one dataset prefix (PREFIX.bin/.idx)");
  for (const auto& p : c.data.paths) {
    TRIDENT_CHECK(fs::exists(p + ".bin") && fs::exists(p + ".idx"),
                  "data.paths: '{}' has no {}.bin/.idx (run `trident preprocess` or scripts/prepare_corpus.sh)", p, p);
  }
  for (const auto& p : c.data.valid_paths) {
    TRIDENT_CHECK(fs::exists(p + ".bin") && fs::exists(p + ".idx"), "data.valid_paths: '{}' has no {}.bin/.idx", p, p);
  }
}

}  // namespace detail

}  // namespace trident::train
