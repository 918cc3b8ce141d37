#include "trident/train/trainer.h"

#include <csignal>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "trident/autograd/autograd.h"
#include "trident/checkpoint/sharded.h"
#include "trident/core/memory.h"
#include "trident/core/parallel.h"
#include "trident/data/blended_dataset.h"
#include "trident/data/gpt_dataset.h"
#include "trident/data/indexed_dataset.h"
#include "trident/data/loader.h"
#include "trident/data/split.h"
#include "trident/data/tokenizer.h"
#include "trident/kernels/cpu/matmul.h"
#include "trident/models/causal_lm.h"
#include "trident/models/hf.h"
#include "trident/optim/loss_scaler.h"
#include "trident/optim/optimizer.h"
#include "trident/optim/schedule.h"
#include "trident/train/metrics.h"

namespace trident::train {

namespace fs = std::filesystem;
using autograd::Variable;

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop.store(true); }

DType compute_dtype(const std::string& precision) {
  if (precision == "fp32") return DType::f32;
  if (precision == "bf16") return DType::bf16;
  if (precision == "fp16") return DType::f16;
  TRIDENT_FAIL("train.precision must be fp32, bf16 or fp16, got '{}'", precision);
}

std::int64_t accumulation_steps(const Config& c, int dp) {
  const std::int64_t per_step = c.train.micro_batch_size * dp;
  const std::int64_t global = c.train.global_batch_size > 0 ? c.train.global_batch_size : per_step;
  return global / per_step;
}

models::TransformerSpec model_spec(const ModelConfig& m, std::int64_t tokenizer_vocab, std::int64_t seq_len) {
  models::TransformerSpec s;
  if (!m.preset.empty()) {
    s = models::preset(m.preset);
  } else {
    TRIDENT_CHECK(m.arch == "gpt2" || m.arch == "llama", "model.arch must be gpt2 or llama, got '{}'", m.arch);
    s.arch = m.arch == "gpt2" ? nn::Arch::gpt2 : nn::Arch::llama;
    s.tie_embeddings = s.arch == nn::Arch::gpt2 ? m.tie_embeddings : false;
    s.norm_eps = m.norm_eps;
  }
  if (!m.preset.empty() && m.arch != "gpt2") {
    TRIDENT_CHECK((m.arch == "llama") == (s.arch == nn::Arch::llama),
                  "model.arch '{}' contradicts model.preset '{}'", m.arch, m.preset);
  }
  if (m.n_layer) s.n_layer = m.n_layer;
  if (m.n_head) s.n_head = m.n_head;
  if (m.d_model) s.d_model = m.d_model;
  s.n_kv_head = m.n_kv_head ? m.n_kv_head : (s.n_kv_head && !m.n_head ? s.n_kv_head : s.n_head);
  if (m.d_ff) s.d_ff = m.d_ff;
  if (!s.d_ff || (m.d_model && !m.d_ff)) s.d_ff = models::default_d_ff(s.arch, s.d_model);
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
  s.rope_theta = m.rope_theta;
  if (m.preset.empty()) s.norm_eps = m.norm_eps;
  s.validate();
  return s;
}

// --- checkpoints ---

std::vector<checkpoint::TensorPiece> pieces_of(const std::string& kind, const nn::Parameter& p, const Tensor& data) {
  std::vector<checkpoint::TensorPiece> out;
  if (p.shard.is_whole()) {
    out.push_back({kind + "/" + p.name, p.global_shape, std::vector<std::int64_t>(p.global_shape.rank(), 0), data});
  }
  return out;
}

std::string step_dir_name(std::int64_t step) { return fmt::format("step_{:08d}", step); }

struct RunState {
  std::int64_t step = 0;              // optimizer steps completed
  std::int64_t consumed_samples = 0;  // global samples consumed
  double loss_scale = 0;
};

std::string save_checkpoint(const std::string& root, const models::CausalLM& model, const optim::Optimizer& opt,
                            const RunState& state, const Config& config, const std::string& tokenizer_path) {
  const std::string final_dir = (fs::path(root) / step_dir_name(state.step)).string();
  const std::string tmp = checkpoint::begin_checkpoint(final_dir);
  std::vector<checkpoint::TensorPiece> pieces;
  for (const nn::Parameter* p : model.parameters()) {
    auto v = pieces_of("model", *p, p->var.data());
    pieces.insert(pieces.end(), v.begin(), v.end());
  }
  for (const auto& [key, tensor] : opt.state()) {
    const auto slash = key.find('/');
    const std::string kind = key.substr(0, slash), name = key.substr(slash + 1);
    const nn::Parameter* p = nullptr;
    for (const nn::Parameter* q : opt.params())
      if (q->name == name) p = q;
    TRIDENT_CHECK(p != nullptr, "checkpoint: optimizer state '{}' belongs to no parameter", key);
    auto v = pieces_of(kind, *p, tensor);
    pieces.insert(pieces.end(), v.begin(), v.end());
  }
  std::vector<std::string> files = {"shard-00000.safetensors", "config.toml", "config.json", "tokenizer.json"};
  checkpoint::write_shard(tmp + "/shard-00000.safetensors", pieces);
  {
    std::ofstream(tmp + "/config.toml") << to_toml(config);
    std::ofstream(tmp + "/config.json") << models::hf_config_json(model.spec());
    fs::copy_file(tokenizer_path, tmp + "/tokenizer.json", fs::copy_options::overwrite_existing);
  }
  nlohmann::json meta = {{"step", state.step},
                         {"consumed_samples", state.consumed_samples},
                         {"optimizer_step", opt.steps_taken()},
                         {"loss_scale", state.loss_scale},
                         {"seed", config.train.seed},
                         {"layout", {{"world_size", 1}, {"dp", 1}, {"tp", 1}, {"pp", 1}, {"zero_stage", 0}}},
                         {"config", to_toml(config)}};
  checkpoint::commit_checkpoint(tmp, final_dir, meta, files, (fs::path(root) / "latest").string());
  checkpoint::prune_checkpoints(root, config.checkpoint.keep, final_dir);
  return final_dir;
}

RunState load_checkpoint(const std::string& dir, models::CausalLM& model, optim::Optimizer& opt) {
  checkpoint::CheckpointReader reader(dir);
  for (nn::Parameter* p : model.parameters()) {
    const std::string key = "model/" + p->name;
    TRIDENT_CHECK(reader.contains(key), "checkpoint '{}' has no tensor '{}'", dir, p->name);
    TRIDENT_CHECK(reader.global_shape(key) == p->global_shape,
                  "checkpoint '{}': tensor '{}' has shape {} but the model expects {}", dir, p->name,
                  reader.global_shape(key), p->global_shape);
    p->var.data().copy_from(reader.read(key, p->var.dtype()));
  }
  std::map<std::string, Tensor> state;
  for (const auto& [key, tensor] : opt.state()) {
    TRIDENT_CHECK(reader.contains(key), "checkpoint '{}' has no optimizer state '{}'", dir, key);
    state[key] = reader.read(key, tensor.dtype());
  }
  opt.load_state(state);
  const auto& meta = reader.meta();
  opt.set_step(meta.value("optimizer_step", std::int64_t{0}));
  RunState rs;
  rs.step = meta.at("step").get<std::int64_t>();
  rs.consumed_samples = meta.at("consumed_samples").get<std::int64_t>();
  rs.loss_scale = meta.value("loss_scale", 0.0);
  return rs;
}

// --- data ---

struct DataSources {
  data::Tokenizer tokenizer;
  std::shared_ptr<const data::SampleSource> train;
  std::shared_ptr<const data::SampleSource> valid;  // null when the split has no documents
};

DataSources open_data(const Config& c, std::int64_t train_samples) {
  DataSources d;
  d.tokenizer = data::Tokenizer::load(c.data.tokenizer);
  std::vector<std::shared_ptr<const data::SampleSource>> train, valid;
  std::vector<double> weights = c.data.weights;
  double wsum = 0;
  for (double w : weights) wsum += w;
  for (std::size_t i = 0; i < c.data.paths.size(); ++i) {
    auto ds = data::IndexedDataset::open(c.data.paths[i]);
    auto ranges = data::parse_split(c.data.split, static_cast<std::int64_t>(ds->size()));
    // Blended sources must hold at least their share of the blend (Megatron's 0.5% margin).
    const double share = weights.empty() ? 1.0 : weights[i] / wsum;
    const bool blended = c.data.paths.size() > 1;
    data::GptDatasetConfig g;
    g.seq_len = c.train.seq_len;
    g.seed = static_cast<std::uint64_t>(c.train.seed);
    g.cache_dir = c.data.cache_dir.empty() ? fs::path(c.data.paths[i]).parent_path() / "index-cache"
                                           : fs::path(c.data.cache_dir);
    g.documents = ranges[0];
    g.num_samples = blended ? static_cast<std::int64_t>(std::ceil(share * static_cast<double>(train_samples) * 1.005)) + 1 : 0;
    TRIDENT_CHECK(ranges[0].size() > 0, "data.split '{}' leaves no training documents in '{}'", c.data.split,
                  c.data.paths[i]);
    train.push_back(std::make_shared<data::GptDataset>(ds, g));
    if (ranges[1].size() > 0) {
      g.documents = ranges[1];
      g.num_samples = 0;
      valid.push_back(std::make_shared<data::GptDataset>(ds, g));
    }
  }
  if (!c.data.valid_paths.empty()) {
    valid.clear();
    for (const auto& path : c.data.valid_paths) {
      data::GptDatasetConfig g;
      g.seq_len = c.train.seq_len;
      g.seed = static_cast<std::uint64_t>(c.train.seed);
      g.cache_dir = c.data.cache_dir.empty() ? fs::path(path).parent_path() / "index-cache" : fs::path(c.data.cache_dir);
      auto ds = data::IndexedDataset::open(path);
      g.documents = data::DocumentRange{0, static_cast<std::int64_t>(ds->size())};
      valid.push_back(std::make_shared<data::GptDataset>(ds, g));
    }
  }
  if (train.size() == 1) {
    d.train = train[0];
  } else {
    d.train = std::make_shared<data::BlendedDataset>(train, weights, train_samples);
  }
  if (!valid.empty()) d.valid = valid[0];  // validation on the first dataset's split
  return d;
}

}  // namespace

void request_stop() noexcept { g_stop.store(true); }

void validate_config(const Config& c, int world_size) {
  (void)compute_dtype(c.train.precision);
  TRIDENT_CHECK(c.train.seq_len > 0, "train.seq_len must be positive, got {}", c.train.seq_len);
  TRIDENT_CHECK(c.train.micro_batch_size > 0, "train.micro_batch_size must be positive, got {}",
                c.train.micro_batch_size);
  TRIDENT_CHECK(c.train.steps > 0, "train.steps must be positive, got {}", c.train.steps);
  TRIDENT_CHECK(c.train.log_interval > 0, "train.log_interval must be positive, got {}", c.train.log_interval);
  const std::int64_t tp = c.dist.tensor_parallel_size, pp = c.dist.pipeline_parallel_size;
  TRIDENT_CHECK(tp == 1 && pp == 1 && c.dist.zero_stage == 0 && world_size == 1,
                "this build trains on one process (dist.tensor_parallel_size={}, pipeline_parallel_size={}, "
                "zero_stage={}, {} ranks): data, tensor and pipeline parallelism arrive with the distributed "
                "trainer", tp, pp, c.dist.zero_stage, world_size);
  const std::int64_t dp = c.dist.data_parallel_size ? c.dist.data_parallel_size : world_size / (tp * pp);
  const std::int64_t per_step = c.train.micro_batch_size * dp;
  if (c.train.global_batch_size > 0) {
    TRIDENT_CHECK(c.train.global_batch_size % per_step == 0,
                  "train.global_batch_size={} must be a multiple of micro_batch_size × data_parallel_size = {} × {} "
                  "= {}",
                  c.train.global_batch_size, c.train.micro_batch_size, dp, per_step);
  }
  TRIDENT_CHECK(c.optim.name == "adamw" || c.optim.name == "sgd", "optim.name must be adamw or sgd, got '{}'",
                c.optim.name);
  TRIDENT_CHECK(c.optim.betas.size() == 2, "optim.betas must hold two numbers, got {}", c.optim.betas.size());
  TRIDENT_CHECK(c.optim.lr > 0, "optim.lr must be positive, got {}", c.optim.lr);
  (void)optim::parse_decay(c.schedule.decay);
  TRIDENT_CHECK(!c.data.paths.empty(), "data.paths is empty: give at least one dataset prefix (PREFIX.bin/.idx)");
  TRIDENT_CHECK(c.data.weights.empty() || c.data.weights.size() == c.data.paths.size(),
                "data.weights has {} entries for {} data.paths", c.data.weights.size(), c.data.paths.size());
  for (const auto& p : c.data.paths) {
    TRIDENT_CHECK(fs::exists(p + ".bin") && fs::exists(p + ".idx"),
                  "data.paths: '{}' has no {}.bin/.idx (run `trident preprocess` or scripts/prepare_corpus.sh)", p, p);
  }
  for (const auto& p : c.data.valid_paths) {
    TRIDENT_CHECK(fs::exists(p + ".bin") && fs::exists(p + ".idx"), "data.valid_paths: '{}' has no {}.bin/.idx", p, p);
  }
  TRIDENT_CHECK(!c.data.tokenizer.empty(), "data.tokenizer is empty: give the tokenizer.json the data was made with");
  TRIDENT_CHECK(fs::exists(c.data.tokenizer), "data.tokenizer: '{}' does not exist", c.data.tokenizer);
  TRIDENT_CHECK(c.train.device == "cpu", "train.device '{}' is not available in this build (cpu only)",
                c.train.device);
}

TrainSummary train(const TrainOptions& options) {
  Config config = load_config(options.config_path, options.overrides);
  validate_config(config, 1);
  if (config.train.threads > 0) set_num_threads(static_cast<int>(config.train.threads));

  const std::string run_dir = options.run_dir;
  fs::create_directories(run_dir);
  const std::string ckpt_root = config.checkpoint.dir.empty() ? (fs::path(run_dir) / "checkpoints").string()
                                                              : config.checkpoint.dir;
  MetricsLogger log((fs::path(run_dir) / config.log.metrics_file).string(), config.log.progress, !options.quiet);
  {
    std::ofstream(fs::path(run_dir) / "config.toml") << to_toml(config);
  }

  const int dp = 1;
  const std::int64_t accum = accumulation_steps(config, dp);
  const std::int64_t global_batch = config.train.micro_batch_size * accum * dp;
  const std::int64_t T = config.train.seq_len;
  DataSources data = open_data(config, config.train.steps * global_batch);
  const models::TransformerSpec spec = model_spec(config.model, data.tokenizer.vocab_size(), T);
  TRIDENT_CHECK(T <= spec.max_seq_len, "train.seq_len={} exceeds the model's max_seq_len={}", T, spec.max_seq_len);
  TRIDENT_CHECK(data.tokenizer.vocab_size() <= spec.vocab_size,
                "model vocab_size={} is smaller than the tokenizer's {} tokens", spec.vocab_size,
                data.tokenizer.vocab_size());

  models::CausalLM model(spec);
  model.initialize(static_cast<std::uint64_t>(config.train.seed));
  model.set_activation_checkpointing(config.train.activation_checkpointing);
  std::unique_ptr<optim::Optimizer> opt;
  if (config.optim.name == "adamw") {
    opt = std::make_unique<optim::AdamW>(model.parameters(), optim::AdamWOptions{config.optim.betas[0],
                                                                                 config.optim.betas[1],
                                                                                 config.optim.eps,
                                                                                 config.optim.weight_decay});
  } else {
    opt = std::make_unique<optim::SGD>(model.parameters(),
                                       optim::SGDOptions{config.optim.momentum, config.optim.weight_decay, false});
  }
  // Allocate the optimiser state now so a resume can fill it.
  (void)opt->state();
  const DType cdt = compute_dtype(config.train.precision);
  optim::DynamicLossScaler scaler(config.optim.initial_loss_scale);
  const bool fp16 = cdt == DType::f16;

  RunState state;
  std::string resume_from;
  if (options.resume || config.checkpoint.resume == "auto") {
    resume_from = checkpoint::read_latest((fs::path(ckpt_root) / "latest").string());
    TRIDENT_CHECK(!resume_from.empty() || config.checkpoint.resume == "auto",
                  "--resume: no checkpoint found under '{}'", ckpt_root);
  } else if (!config.checkpoint.resume.empty()) {
    resume_from = config.checkpoint.resume;
  }
  if (!resume_from.empty()) {
    state = load_checkpoint(resume_from, model, *opt);
    if (fp16 && state.loss_scale > 0) scaler.set_scale(state.loss_scale);
    log.message(fmt::format("resumed from {} at step {} ({} samples consumed)", resume_from, state.step,
                            state.consumed_samples));
  }

  const double peak_gflops = config.train.peak_gflops > 0
                                 ? config.train.peak_gflops
                                 : kernels::cpu::measure_matmul_peak_gflops(cdt == DType::bf16 ? DType::bf16 : DType::f32);
  log.message(fmt::format("trident: {} {} ({:.2f}M parameters), {} precision, {} threads, global batch {} × {} tokens "
                          "(micro-batch {} × {} accumulation), matmul peak {:.0f} GFLOP/s",
                          config.model.preset.empty() ? config.model.arch : config.model.preset,
                          spec.arch == nn::Arch::gpt2 ? "GPT-2" : "LLaMA",
                          static_cast<double>(model.num_parameters()) / 1e6, config.train.precision, num_threads(),
                          global_batch, T, config.train.micro_batch_size, accum, peak_gflops));

  data::LoaderOptions lo;
  lo.micro_batch_size = config.train.micro_batch_size;
  lo.dp_rank = 0;
  lo.dp_size = dp;
  lo.consumed_samples = state.consumed_samples;
  lo.seed = static_cast<std::uint64_t>(config.train.seed);
  lo.prefetch = static_cast<int>(config.data.prefetch);
  data::DataLoader loader(data.train, lo);

  optim::ScheduleOptions sched{config.optim.lr, config.schedule.min_lr, config.schedule.warmup_steps,
                               config.schedule.decay_steps > 0 ? config.schedule.decay_steps : config.train.steps,
                               optim::parse_decay(config.schedule.decay)};

  auto evaluate = [&](std::int64_t step) -> double {
    data::LoaderOptions vo = lo;
    vo.consumed_samples = 0;
    vo.prefetch = 0;
    data::DataLoader vloader(data.valid, vo);
    autograd::NoGradGuard no_grad;
    double total = 0;
    const std::int64_t n = std::max<std::int64_t>(config.train.eval_steps, 1);
    for (std::int64_t i = 0; i < n; ++i) {
      data::Batch b = vloader.next();
      nn::ForwardContext ctx;
      ctx.compute_dtype = cdt;
      total += model.loss(b.tokens, b.labels, ctx).data().item();
    }
    const double v = total / static_cast<double>(n);
    log.log_eval(step, v);
    return v;
  };

  TrainSummary summary;
  g_stop.store(false);
  auto old_int = std::signal(SIGINT, on_stop_signal);
  auto old_term = std::signal(SIGTERM, on_stop_signal);
  struct RestoreSignals {
    decltype(old_int) i, t;
    ~RestoreSignals() {
      std::signal(SIGINT, i);
      std::signal(SIGTERM, t);
    }
  } restore{old_int, old_term};

  if (data.valid && state.step == 0 && config.train.eval_interval > 0) {
    summary.val_losses.emplace_back(0, evaluate(0));
  }
  const auto run_start = std::chrono::steady_clock::now();
  const std::int64_t first_step = state.step;
  const double tokens_per_step = static_cast<double>(global_batch * T);
  const double flops_per_token = model.flops_per_token(T);
  reset_peak_memory(Device::cpu());

  while (state.step < config.train.steps) {
    const std::int64_t step = state.step + 1;
    const auto t0 = std::chrono::steady_clock::now();
    const double lr = optim::learning_rate(sched, step);
    opt->zero_grad();
    const double loss_scale = fp16 ? scaler.scale() : 1.0;
    double step_loss = 0;
    for (std::int64_t m = 0; m < accum; ++m) {
      data::Batch b = loader.next();
      nn::ForwardContext ctx;
      ctx.training = true;
      ctx.seed = static_cast<std::uint64_t>(config.train.seed);
      ctx.step = step;
      ctx.global_batch = global_batch;
      ctx.batch_offset = m * config.train.micro_batch_size * dp;
      ctx.compute_dtype = cdt;
      Variable loss = model.loss(b.tokens, b.labels, ctx, tokens_per_step);
      step_loss += loss.data().item();
      if (loss_scale != 1.0) loss = autograd::scale(loss, loss_scale);
      loss.backward();
    }
    const auto params = model.parameters();
    const double sumsq = optim::grad_sum_of_squares(params);
    const bool overflow = !std::isfinite(sumsq);
    const double grad_norm = std::sqrt(sumsq) / loss_scale;
    bool skipped = false;
    if (fp16) skipped = scaler.update(overflow);
    TRIDENT_CHECK(fp16 || std::isfinite(step_loss),
                  "training diverged at step {}: loss is {} (lower optim.lr or enable clipping)", step, step_loss);
    if (!skipped) {
      const double coef = optim::clip_coefficient(grad_norm, config.optim.clip_grad);
      opt->step(lr, coef / loss_scale);
    }
    state.step = step;
    state.consumed_samples = loader.consumed_samples();
    state.loss_scale = fp16 ? scaler.scale() : 0;
    summary.losses.push_back(step_loss);

    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    StepMetrics mtr;
    mtr.step = step;
    mtr.steps = config.train.steps;
    mtr.loss = step_loss;
    mtr.lr = lr;
    mtr.grad_norm = grad_norm;
    mtr.step_ms = dt * 1e3;
    mtr.tokens_per_s = tokens_per_step / dt;
    mtr.mfu = flops_per_token * mtr.tokens_per_s / (peak_gflops * 1e9);
    mtr.peak_memory_mb = static_cast<double>(memory_stats(Device::cpu()).peak) / (1 << 20);
    mtr.eta_s = elapsed / static_cast<double>(step - first_step) * static_cast<double>(config.train.steps - step);
    mtr.loss_scale = fp16 ? scaler.scale() : 0;
    mtr.skipped = skipped;
    log.log_step(mtr, step % config.train.log_interval == 0 || step == config.train.steps);

    if (data.valid && config.train.eval_interval > 0 &&
        (step % config.train.eval_interval == 0 || step == config.train.steps)) {
      summary.val_losses.emplace_back(step, evaluate(step));
    }
    const bool stop = g_stop.load();
    const bool at_interval = config.checkpoint.interval > 0 && step % config.checkpoint.interval == 0;
    if (stop || at_interval || step == config.train.steps) {
      summary.last_checkpoint = save_checkpoint(ckpt_root, model, *opt, state, config, config.data.tokenizer);
      log.message(fmt::format("saved checkpoint {}", summary.last_checkpoint));
    }
    if (stop) {
      summary.interrupted = true;
      log.message(fmt::format("stopped by signal after step {}; resume with --resume", step));
      break;
    }
  }
  summary.steps_done = state.step;
  log.finish();
  return summary;
}

}  // namespace trident::train
