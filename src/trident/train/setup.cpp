#include "trident/train/setup.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>

#include "trident/data/blended_dataset.h"
#include "trident/data/gpt_dataset.h"
#include "trident/data/indexed_dataset.h"
#include "trident/data/split.h"
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

namespace {

fs::path cache_dir_of(const Config& c, const data::IndexedDataset& ds) {
  return c.data.cache_dir.empty() ? fs::path(ds.prefix()).parent_path() / "index-cache" : fs::path(c.data.cache_dir);
}

// Tokens in documents (sequences, as Megatron splits them) [r.begin, r.end) of `ds`.
std::int64_t tokens_in(const data::IndexedDataset& ds, data::DocumentRange r) {
  const auto lengths =
      ds.sequence_lengths().subspan(static_cast<std::size_t>(r.begin), static_cast<std::size_t>(r.size()));
  return std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
}

// One dataset's documents for one split, and its weight in that split's blend.
struct Part {
  std::shared_ptr<const data::IndexedDataset> dataset;
  data::DocumentRange documents;
  double weight = 0;
  std::string origin;  // for errors: which key chose these documents
};

// The sample stream of one split: a single dataset as it is (one epoch after
// another), or several blended by weight into `samples` samples, each built
// with its share of them (Megatron's 0.5% margin) so the blend never runs
// past a dataset's end.
std::shared_ptr<const data::SampleSource> sample_stream(const Config& c, const std::vector<Part>& parts,
                                                        std::int64_t samples, std::string_view split,
                                                        models::Objective objective) {
  double total = 0;
  for (const Part& p : parts) total += p.weight;
  std::vector<std::shared_ptr<const data::SampleSource>> sources;
  std::vector<double> weights;
  for (const Part& p : parts) {
    data::GptDatasetConfig g;
    g.seq_len = c.train.seq_len;
    g.seed = static_cast<std::uint64_t>(c.train.seed);
    g.cache_dir = cache_dir_of(c, *p.dataset);
    g.documents = p.documents;
    g.add_extra_token = objective == models::Objective::next_token;
    if (parts.size() > 1) {
      g.num_samples = static_cast<std::int64_t>(std::ceil(p.weight / total * static_cast<double>(samples) * 1.005)) + 1;
    }
    try {
      sources.push_back(std::make_shared<data::GptDataset>(p.dataset, g));
    } catch (const Error& e) {
      TRIDENT_FAIL("{} data ({}): {}", split, p.origin, e.message());
    }
    weights.push_back(p.weight);
  }
  if (sources.size() == 1) return sources[0];
  return std::make_shared<data::BlendedDataset>(std::move(sources), std::move(weights), samples);
}

// The token ids of `ds`, from the cache (keyed by the .idx hash and the .bin's size and time) or a scan.
data::IndexedDataset::TokenRange token_range(const Config& c, const data::IndexedDataset& ds) {
  std::error_code ec;
  const fs::path bin = ds.prefix() + ".bin";
  const auto mtime = fs::last_write_time(bin, ec).time_since_epoch().count();
  const std::string key = fmt::format("{} {} {}", ds.index_hash(), ds.bin_bytes(), ec ? 0 : mtime);
  const fs::path cache = cache_dir_of(c, ds) / fmt::format("{}-{:016x}.token_range",
                                                          fs::path(ds.prefix()).filename().string(), ds.index_hash());
  {
    std::ifstream in(cache);
    std::string k1, k2, k3;
    data::IndexedDataset::TokenRange r;
    if (in >> k1 >> k2 >> k3 >> r.min >> r.max && fmt::format("{} {} {}", k1, k2, k3) == key) return r;
  }
  const data::IndexedDataset::TokenRange r = ds.token_range();
  try {  // a cache that cannot be written costs the next run a scan, nothing else
    fs::create_directories(cache.parent_path());
    write_file_atomically(cache, fmt::format("{} {} {}\n", key, r.min, r.max));
  } catch (const std::exception&) {
  }
  return r;
}

void check_token_ids(const Config& c, const data::IndexedDataset& ds, const data::Tokenizer& tokenizer,
                     std::string_view key) {
  const data::IndexedDataset::TokenRange r = token_range(c, ds);
  if (r.max < r.min) return;  // no tokens
  const std::int64_t vocab = tokenizer.vocab_size();
  TRIDENT_CHECK(r.min >= 0, "{}: dataset '{}.bin' holds token id {}, which is no token id (they are 0 or more)", key,
                ds.prefix(), r.min);
  TRIDENT_CHECK(r.max < vocab,
                "{}: dataset '{}.bin' holds token id {}, but data.tokenizer '{}' has {} tokens (ids up to {}): the "
                "dataset was made with another tokenizer; preprocess it with this one, or give the one it was made "
                "with",
                key, ds.prefix(), r.max, c.data.tokenizer, vocab, vocab - 1);
}

}  // namespace

std::int64_t epoch_samples(const Config& c) {
  std::int64_t samples = 0;
  for (const auto& path : c.data.paths) {
    auto ds = data::IndexedDataset::open(path);
    if (ds->size() == 0) continue;  // open_data names an empty dataset
    const auto ranges = data::parse_split(c.data.split, static_cast<std::int64_t>(ds->size()));
    // A sample is seq_len + 1 tokens, consecutive samples sharing one.
    const std::int64_t tokens = tokens_in(*ds, ranges[0]);
    if (tokens > 1) samples += (tokens - 1) / c.train.seq_len;
  }
  return samples;
}

DataSources open_data(const Config& c, std::int64_t train_samples, std::int64_t valid_samples) {
  return open_data(c, data::Tokenizer::load(c.data.tokenizer), train_samples, valid_samples);
}

DataSources open_data(const Config& c, data::Tokenizer tokenizer, std::int64_t train_samples,
                      std::int64_t valid_samples, models::Objective objective) {
  DataSources d;
  d.tokenizer = std::move(tokenizer);
  // Without data.weights a blend draws from each dataset in proportion to its
  // tokens in the split (not to the samples built for the blend, which would
  // make every dataset as large as the whole run).
  std::vector<Part> train, valid;
  for (std::size_t i = 0; i < c.data.paths.size(); ++i) {
    auto ds = data::IndexedDataset::open(c.data.paths[i]);
    TRIDENT_CHECK(ds->size() > 0, "data.paths: dataset '{}' is empty (0 documents)", c.data.paths[i]);
    check_token_ids(c, *ds, d.tokenizer, "data.paths");
    const auto ranges = data::parse_split(c.data.split, static_cast<std::int64_t>(ds->size()));
    TRIDENT_CHECK(ranges[0].size() > 0, "data.split '{}' leaves no training documents in '{}'", c.data.split,
                  c.data.paths[i]);
    auto weight = [&](data::DocumentRange r) {
      return c.data.weights.empty() ? static_cast<double>(tokens_in(*ds, r)) : c.data.weights[i];
    };
    auto origin = [&](data::DocumentRange r) {
      return fmt::format("documents [{}, {}) by data.split '{}'", r.begin, r.end, c.data.split);
    };
    train.push_back({ds, ranges[0], weight(ranges[0]), origin(ranges[0])});
    if (ranges[1].size() > 0) valid.push_back({ds, ranges[1], weight(ranges[1]), origin(ranges[1])});
  }
  if (!c.data.valid_paths.empty()) {
    valid.clear();
    for (const auto& path : c.data.valid_paths) {
      auto ds = data::IndexedDataset::open(path);
      TRIDENT_CHECK(ds->size() > 0, "data.valid_paths: dataset '{}' is empty (0 documents)", path);
      check_token_ids(c, *ds, d.tokenizer, "data.valid_paths");
      const data::DocumentRange all{0, static_cast<std::int64_t>(ds->size())};
      valid.push_back({ds, all, static_cast<double>(tokens_in(*ds, all)), "data.valid_paths"});
    }
  }
  d.train = sample_stream(c, train, train_samples, "train", objective);
  if (!valid.empty() && c.train.eval_interval > 0) {
    d.valid = sample_stream(c, valid, valid_samples, "validation", objective);
  }
  return d;
}

}  // namespace detail

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
  TRIDENT_CHECK(tp >= 1 && pp >= 1,
                "dist.tensor_parallel_size and pipeline_parallel_size must be at least 1 (got {} "
                "and {})",
                tp, pp);
  TRIDENT_CHECK((tp & (tp - 1)) == 0, "dist.tensor_parallel_size must be a power of two, got {}", tp);
  TRIDENT_CHECK(!c.dist.sequence_parallel || tp == 1 || c.train.seq_len % tp == 0,
                "dist.sequence_parallel splits the sequence over the tensor-parallel ranks: train.seq_len={} must be a "
                "multiple of dist.tensor_parallel_size={}",
                c.train.seq_len, tp);
  // Bounded before they are multiplied: a product that wraps around (to 0, or to a divisor of the world size)
  // would divide by zero or pass for a layout of that size.
  TRIDENT_CHECK(tp <= world_size && pp <= world_size && tp * pp <= world_size,
                "dist: tensor_parallel_size × pipeline_parallel_size = {} × {} is more than the job's {} rank(s)", tp,
                pp, world_size);
  TRIDENT_CHECK(world_size % (tp * pp) == 0, "dist: tp × pp = {} does not divide the {} ranks of the job", tp * pp,
                world_size);
  const std::int64_t dp = c.dist.data_parallel_size ? c.dist.data_parallel_size : world_size / (tp * pp);
  TRIDENT_CHECK(dp >= 1 && dp <= world_size, "dist.data_parallel_size={} must be between 1 and the job's {} rank(s)",
                dp, world_size);
  TRIDENT_CHECK(dp * tp * pp == world_size,
                "dist: data_parallel_size × tensor_parallel_size × pipeline_parallel_size = {} × {} × {} = {}, but "
                "the job has {} rank(s)",
                dp, tp, pp, dp * tp * pp, world_size);
  TRIDENT_CHECK(c.dist.zero_stage >= 0 && c.dist.zero_stage <= 3, "dist.zero_stage must be 0, 1, 2 or 3, got {}",
                c.dist.zero_stage);
  TRIDENT_CHECK(c.dist.zero_stage == 0 || c.optim.name == "adamw",
                "dist.zero_stage={} shards AdamW state; optim.name='{}' is not supported with ZeRO", c.dist.zero_stage,
                c.optim.name);
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
  TRIDENT_CHECK(c.optim.name == "adamw" || c.optim.name == "sgd", "optim.name must be adamw or sgd, got '{}'",
                c.optim.name);
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
  validate_monitoring(c);
  TRIDENT_CHECK(!c.data.paths.empty(), "data.paths is empty: give at least one dataset prefix (PREFIX.bin/.idx)");
  TRIDENT_CHECK(c.data.weights.empty() || c.data.weights.size() == c.data.paths.size(),
                "data.weights has {} entries for {} data.paths", c.data.weights.size(), c.data.paths.size());
  double weight_sum = 0;
  for (double w : c.data.weights) {
    TRIDENT_CHECK(std::isfinite(w) && w >= 0, "data.weights: {} is not a weight (expected a finite number >= 0)", w);
    weight_sum += w;
  }
  TRIDENT_CHECK(c.data.weights.empty() || weight_sum > 0,
                "data.weights are all 0: at least one dataset must be drawn from");
  for (const auto& p : c.data.paths) {
    TRIDENT_CHECK(fs::exists(p + ".bin") && fs::exists(p + ".idx"),
                  "data.paths: '{}' has no {}.bin/.idx (run `trident preprocess` or scripts/prepare_corpus.sh)", p, p);
  }
  for (const auto& p : c.data.valid_paths) {
    TRIDENT_CHECK(fs::exists(p + ".bin") && fs::exists(p + ".idx"), "data.valid_paths: '{}' has no {}.bin/.idx", p, p);
  }
  TRIDENT_CHECK(!c.data.tokenizer.empty(), "data.tokenizer is empty: give the tokenizer.json the data was made with");
  TRIDENT_CHECK(fs::exists(c.data.tokenizer), "data.tokenizer: '{}' does not exist", c.data.tokenizer);
  (void)training_device(c);
}

}  // namespace trident::train
