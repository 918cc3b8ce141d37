#include "trident/train/trainer.h"

#include <xxhash.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "trident/autograd/autograd.h"
#include "trident/core/memory.h"
#include "trident/core/parallel.h"
#include "trident/data/loader.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/dist/self_communicator.h"
#include "trident/kernels/cpu/matmul.h"
#include "trident/models/hf.h"
#include "trident/optim/loss_scaler.h"
#include "trident/optim/schedule.h"
#include "trident/train/device.h"
#include "trident/train/metrics.h"
#include "trident/train/model_runner.h"
#include "trident/train/memory_estimate.h"
#include "trident/train/run_checkpoint.h"
#include "trident/train/run_lock.h"
#include "trident/train/setup.h"


namespace trident::train {

namespace fs = std::filesystem;
using autograd::Variable;
using namespace detail;

namespace {

std::atomic<bool> g_stop{false};
// The first SIGINT/SIGTERM asks for a checkpoint and a clean stop; the
// handler then steps aside, so a second one ends a stop that hangs.
extern "C" void on_stop_signal(int sig) {
  g_stop.store(true);
  std::signal(sig, SIG_DFL);
}

class SignalHandlers {
 public:
  SignalHandlers() : int_(std::signal(SIGINT, on_stop_signal)), term_(std::signal(SIGTERM, on_stop_signal)) {}
  ~SignalHandlers() {
    std::signal(SIGINT, int_);
    std::signal(SIGTERM, term_);
  }

 private:
  using Handler = void (*)(int);
  Handler int_, term_;
};

// Every rank must have resolved the same configuration; compare hashes.
void check_same_config(dist::Communicator& world, const Config& config) {
  const std::string text = to_toml(config);
  const auto h = static_cast<double>(XXH64(text.data(), text.size(), 0) >> 12);  // exact in a double
  const double lo = world.all_reduce_scalar(h, dist::ReduceOp::min);
  const double hi = world.all_reduce_scalar(h, dist::ReduceOp::max);
  TRIDENT_CHECK(lo == hi,
                "the ranks resolved different configurations (this rank's hash {}, range [{}, {}]): give every rank "
                "the same config file and --set overrides",
                h, lo, hi);
}

ParallelState make_parallel(const Config& config, std::shared_ptr<dist::Communicator> world, Device device) {
  ParallelState par;
  if (world) {
    par.world = std::move(world);
  } else {
    par.world = dist::launched_by_mpi() ? dist::mpi_world(config.dist.timeout_s) : dist::self_communicator();
  }
  par.rank = par.world->rank();
  validate_config(config, par.world->size());
  check_same_config(*par.world, config);
  par.mesh = std::make_unique<dist::Mesh>(par.world->size(), static_cast<int>(config.dist.tensor_parallel_size),
                                          static_cast<int>(config.dist.pipeline_parallel_size),
                                          static_cast<int>(config.dist.data_parallel_size));
  // GPU tensors travel over NCCL (host values over its MPI twin); the world
  // communicator stays MPI for the trainer's host-side agreement checks.
  const std::shared_ptr<dist::Communicator> groups_of = group_parent(par.world, device, config);
  par.dp = groups_of->split(par.mesh->groups(dist::GroupKind::dp), "dp");
  par.dp_rank = par.dp->rank();
  par.dp_size = par.dp->size();
  par.tp = groups_of->split(par.mesh->groups(dist::GroupKind::tp), "tp");
  par.tp_rank = par.tp->rank();
  par.tp_size = par.tp->size();
  par.pp = groups_of->split(par.mesh->groups(dist::GroupKind::pp), "pp");
  par.pp_rank = par.pp->rank();
  par.pp_size = par.pp->size();
  par.chunks = static_cast<int>(config.dist.virtual_pipeline_size);
  // Megatron's embedding groups (first and last stage of each pipeline); a middle stage is a group of its own.
  std::vector<std::vector<int>> embedding = par.mesh->groups(dist::GroupKind::embedding);
  for (int r = 0; r < par.world->size(); ++r) {
    const auto covered = [r](const std::vector<int>& g) { return std::find(g.begin(), g.end(), r) != g.end(); };
    if (std::none_of(embedding.begin(), embedding.end(), covered)) embedding.push_back({r});
  }
  par.embedding = groups_of->split(embedding, "embedding");
  par.sequence_parallel = config.dist.sequence_parallel && par.tp_size > 1;
  par.zero_stage = static_cast<int>(config.dist.zero_stage);
  return par;
}

void make_optimizer(ParallelState& par, const Config& config, const std::vector<nn::Parameter*>& params) {
  const optim::AdamWOptions adamw{config.optim.betas[0], config.optim.betas[1], config.optim.eps,
                                  config.optim.weight_decay};
  if (par.zero_stage > 0) {
    par.zero = std::make_unique<parallel::ZeroOptimizer>(par.zero_stage, params, par.dp, adamw);
    return;
  }
  if (config.optim.name == "adamw") {
    par.optimizer = std::make_unique<optim::AdamW>(params, adamw);
  } else {
    par.optimizer = std::make_unique<optim::SGD>(
        params, optim::SGDOptions{config.optim.momentum, config.optim.weight_decay, false});
  }
  (void)par.optimizer->state();  // allocate the moments now (a resume fills them)
  if (par.dp_size > 1) {
    par.grad_sync = std::make_unique<parallel::GradSync>(params, par.dp, parallel::GradSyncOptions{});
  }
}

std::string resume_directory(const Config& config, const TrainOptions& options, const std::string& ckpt_root,
                             MetricsLogger& log) {
  if (options.resume || config.checkpoint.resume == "auto") {
    // The newest checkpoint whose files all verify: a crash mid-save never costs more than that save.
    std::vector<std::string> skipped;
    std::string dir = checkpoint::latest_valid_checkpoint(ckpt_root, &skipped);
    for (const std::string& why : skipped) log.message("skipping a checkpoint that does not verify: " + why);
    TRIDENT_CHECK(!dir.empty() || config.checkpoint.resume == "auto", "--resume: no valid checkpoint found under '{}'",
                  ckpt_root);
    // Starting over would later replace (and prune) checkpoints that exist but
    // do not verify, whose weights may be intact: a person decides.
    TRIDENT_CHECK(!dir.empty() || skipped.empty(),
                  "checkpoint.resume='auto': none of the {} checkpoints under '{}' verifies (the newest: {}); move "
                  "them aside to start over, or name one in checkpoint.resume",
                  skipped.size(), ckpt_root, skipped.front());
    return dir;
  }
  return config.checkpoint.resume;
}

}  // namespace

void request_stop() noexcept { g_stop.store(true); }

void load_checkpoint_weights(const std::string& dir, models::CausalLM& model) {
  load_checkpoint_weights(checkpoint::CheckpointReader(dir), model);
}

void load_checkpoint_weights(const checkpoint::CheckpointReader& reader, models::CausalLM& model) {
  load_model(reader, model.parameters());
}

TrainSummary train(const TrainOptions& options) {
  const auto job_start = std::chrono::steady_clock::now();
  Config config = load_config(options.config_path, options.overrides);
  if (config.train.threads > 0) set_num_threads(static_cast<int>(config.train.threads));
  const Device device = training_device(config);
  ParallelState par = make_parallel(config, options.world, device);

  const std::string run_dir = options.run_dir;
  const std::string ckpt_root = config.checkpoint.dir.empty() ? (fs::path(run_dir) / "checkpoints").string()
                                                              : config.checkpoint.dir;
  // One training per run directory: rank 0, which writes it, holds the lock until the end. A refusal is
  // passed to every rank, so all fail alike with the same line (printed once) and nobody waits.
  RunDirLock lock;
  std::string refused;
  if (par.is_root()) {
    try {
      lock = RunDirLock(run_dir);
    } catch (const Error& e) {
      refused = e.message();
    }
  }
  refused = par.world->broadcast_text(refused);
  TRIDENT_CHECK(refused.empty(), "{}", refused);
  if (par.is_root()) std::ofstream(fs::path(run_dir) / "config.toml") << to_toml(config);
  par.world->barrier();
  MetricsLogger log((fs::path(run_dir) / config.log.metrics_file).string(), config.log.progress,
                    !options.quiet && par.is_root());
  log.message("# resolved configuration (also in " + (fs::path(run_dir) / "config.toml").string() + ")\n" +
              to_toml(config));

  const int dp = par.dp_size;
  const std::int64_t mb = config.train.micro_batch_size;
  const std::int64_t accum = accumulation_steps(config, dp);
  const std::int64_t global_batch = mb * accum * dp;
  const std::int64_t T = config.train.seq_len;
  data::Tokenizer tokenizer = data::Tokenizer::load(config.data.tokenizer);
  const models::TransformerSpec spec = with_token_ids(model_spec(config.model, tokenizer.vocab_size(), T), tokenizer);
  TRIDENT_CHECK(T <= spec.max_seq_len, "train.seq_len={} exceeds the model's max_seq_len={}", T, spec.max_seq_len);
  TRIDENT_CHECK(tokenizer.vocab_size() <= spec.vocab_size,
                "model vocab_size={} is smaller than the tokenizer's {} tokens", spec.vocab_size,
                tokenizer.vocab_size());
  TRIDENT_CHECK(!config.data.eod_mask_loss || tokenizer.eod_id().has_value(),
                "data.eod_mask_loss = true needs an end-of-document token, and the tokenizer '{}' has none "
                "(<|endoftext|>, <|end_of_text|>, </s> or <eos>)",
                config.data.tokenizer);
  // Sizes that cannot fit are refused before anything is allocated (or wraps around).
  const MemoryLayout memory = memory_layout(config, par.world->size());
  // On a GPU only the parameters pass through host memory (initialised there, then moved); the device's
  // own size is not queried here yet, so a GPU run is checked for its parameters only.
  check_memory_fits(config, spec, memory, host_memory_bytes(), "this host", device.is_cuda());
  // A step of more micro-batches than an epoch has samples would run for ever (and ignore signals until
  // it ends): surely a mistake.
  if (accum > 1) {
    const std::int64_t epoch = epoch_samples(config);
    TRIDENT_CHECK(epoch == 0 || accum <= epoch,  // 0: no sample at all, which open_data names
                  "train.global_batch_size={} means {} accumulation steps (global_batch_size / (micro_batch_size {} × "
                  "data-parallel {})) per optimizer step, more than the {} samples of one epoch of the training data "
                  "(the bound)",
                  config.train.global_batch_size, accum, mb, dp, epoch);
  }
  std::int64_t train_samples = 0, valid_samples = 0;
  TRIDENT_CHECK(!__builtin_mul_overflow(config.train.steps, global_batch, &train_samples) &&
                    !__builtin_mul_overflow(std::max<std::int64_t>(config.train.eval_steps, 1), global_batch,
                                            &valid_samples),
                "train.steps={} (or train.eval_steps={}) × the global batch of {} samples overflows a 64-bit count",
                config.train.steps, config.train.eval_steps, global_batch);
  DataSources data = open_data(config, std::move(tokenizer), train_samples, valid_samples);

  const DType cdt = compute_dtype(config.train.precision);
  ModelRunner runner(spec, par,
                     ModelRunner::Options{config.dist.pipeline_num_layers,
                                          parallel::pipeline::parse_schedule(config.dist.pipeline_schedule), mb, T,
                                          cdt, device});
  for (const auto& chunk : runner.chunks()) {
    // Initialised (and loaded) on the host, where the counter RNG runs, then moved.
    chunk->initialize(static_cast<std::uint64_t>(config.train.seed));
    if (!config.model.from_pretrained.empty()) models::load_hf_weights(*chunk, config.model.from_pretrained);
    chunk->to(device);
    chunk->set_activation_checkpointing(config.train.activation_checkpointing);
  }
  if (!config.model.from_pretrained.empty()) {
    log.message(fmt::format("loaded pretrained weights from {}", config.model.from_pretrained));
  }
  const auto& params = runner.parameters();
  // Rank 0 chooses and the others follow: a rank that judged on its own after
  // a transient read error could resume from an older step than the rest.
  // Its refusals reach every rank, so all fail alike with one line.
  std::string resume_refused;
  const std::string resume_from = par.world->broadcast_text([&] {
    if (!par.is_root()) return std::string();
    try {
      std::string dir = resume_directory(config, options, ckpt_root, log);
      if (dir.empty()) check_no_other_model(ckpt_root, spec);
      return dir;
    } catch (const Error& e) {
      resume_refused = e.message();
      return std::string();
    }
  }());
  resume_refused = par.world->broadcast_text(resume_refused);
  TRIDENT_CHECK(resume_refused.empty(), "{}", resume_refused);
  std::unique_ptr<checkpoint::CheckpointReader> reader;
  if (!resume_from.empty()) {
    reader = std::make_unique<checkpoint::CheckpointReader>(resume_from);
    check_same_model(*reader, spec);
    load_model(*reader, params);  // before ZeRO-3 keeps only its shards
  }
  make_optimizer(par, config, params);
  const bool fp16 = cdt == DType::f16;
  optim::DynamicLossScaler scaler(config.optim.initial_loss_scale);
  RunState state;
  if (reader) {
    state = load_optimizer_and_state(*reader, params, par);
    if (fp16 && state.loss_scale > 0) {
      scaler.set_scale(state.loss_scale);
      scaler.set_good_steps(state.loss_scale_good_steps);
    }
    log.message(fmt::format("resumed from {} at step {} ({} samples consumed)", resume_from, state.step,
                            state.consumed_samples));
    // The steps after the checkpoint are done again: their old lines go, so metrics.jsonl is one curve.
    log.truncate_after(state.step);
    reader.reset();
  }

  const double peak_gflops = config.train.peak_gflops > 0 ? config.train.peak_gflops : matmul_peak_gflops(device, cdt);
  log.message(fmt::format(
      "trident: {} {} ({:.2f}M parameters), {} precision, {}, {} threads/rank, global batch {} × {} tokens "
      "(micro-batch {} × {} {} × {} data-parallel), ZeRO stage {}, on {}, matmul peak {:.0f} GFLOP/s",
      config.model.preset.empty() ? config.model.arch : config.model.preset,
      spec.arch == nn::Arch::gpt2 ? "GPT-2" : "LLaMA", static_cast<double>(spec.num_parameters()) / 1e6,
      config.train.precision, par.mesh->describe(), num_threads(), global_batch, T, mb, accum,
      par.pipelined() ? fmt::format("micro-batches through the {} pipeline schedule{}", config.dist.pipeline_schedule,
                                    par.chunks > 1 ? fmt::format(" ({} chunks per rank)", par.chunks) : "")
                      : std::string("accumulation"),
      dp, par.zero_stage, device, peak_gflops));

  data::LoaderOptions lo;
  lo.micro_batch_size = mb;
  lo.dp_rank = par.dp_rank;
  lo.dp_size = dp;
  lo.consumed_samples = state.consumed_samples;
  lo.seed = static_cast<std::uint64_t>(config.train.seed);
  lo.prefetch = static_cast<int>(config.data.prefetch);
  if (config.data.eod_mask_loss) lo.masked_input_token = *data.tokenizer.eod_id();  // checked above
  // The labels a run of global samples trains: the divisor of their summed losses (the token mean over
  // the global batch, whatever the layout), at least 1.
  const auto labels_in = [&](const data::SampleSource& source, data::EpochOrder& order, std::int64_t first,
                             std::int64_t count) {
    return static_cast<double>(
        std::max<std::int64_t>(data::trained_labels(source, order, first, count, lo.masked_input_token), 1));
  };
  // Middle pipeline stages need no data (they receive hidden states).
  auto loader = runner.reads_data() ? std::make_unique<data::DataLoader>(data.train, lo) : nullptr;
  BatchMover on_device(device);

  const optim::ScheduleOptions sched = detail::schedule_options(config);
  nn::ParameterGatherer* gatherer = par.zero_stage == 3 ? par.zero.get() : nullptr;

  // eval_steps global batches of the validation stream: the same samples under every layout.
  const std::int64_t eval_steps = std::max<std::int64_t>(config.train.eval_steps, 1);
  double eval_labels = 0;  // the labels one evaluation trains on (the same samples every time)
  auto evaluate = [&](std::int64_t step) -> double {
    data::LoaderOptions vo = lo;
    vo.consumed_samples = 0;
    vo.prefetch = 0;
    auto vloader = runner.reads_data() ? std::make_unique<data::DataLoader>(data.valid, vo) : nullptr;
    if (vloader && eval_labels == 0) {
      data::EpochOrder order(data.valid->size(), lo.seed);
      eval_labels = labels_in(*data.valid, order, 0, eval_steps * global_batch);
    }
    const double v = runner.evaluate(
        eval_steps * accum, [&] { return on_device(vloader->next()); },
        [&](std::int64_t) {
          nn::ForwardContext ctx;
          ctx.compute_dtype = cdt;
          ctx.gatherer = gatherer;
          return ctx;
        },
        eval_labels);
    log.log_eval(step, v);
    return v;
  };

  TrainSummary summary;
  g_stop.store(false);
  SignalHandlers handlers;
  const bool do_eval = data.valid && config.train.eval_interval > 0;
  if (do_eval && state.step == 0) summary.val_losses.emplace_back(0, evaluate(0));

  const auto run_start = std::chrono::steady_clock::now();
  const std::int64_t first_step = state.step;
  const double tokens_per_step = static_cast<double>(global_batch * T);
  // The training stream's order, for counting the labels of each step under data.eod_mask_loss.
  auto train_order = loader ? std::make_unique<data::EpochOrder>(data.train->size(), lo.seed) : nullptr;
  const double flops_per_token = runner.chunks().front()->flops_per_token(T);
  reset_peak_memory(device);

  while (state.step < config.train.steps) {
    const std::int64_t step = state.step + 1;
    const auto t0 = std::chrono::steady_clock::now();
    const double lr = optim::learning_rate(sched, step);
    if (par.zero) {
      par.zero->zero_grad();
    } else if (par.grad_sync) {
      par.grad_sync->zero_grad();
    } else {
      par.optimizer->zero_grad();
    }
    const double loss_scale = fp16 ? scaler.scale() : 1.0;
    const bool masked = loader && lo.masked_input_token >= 0;
    const double step_labels =
        masked ? labels_in(*data.train, *train_order, state.consumed_samples, global_batch) : tokens_per_step;
    // A signal during a long step is acted on at the next micro-batch boundary (all ranks agreeing there;
    // one scalar all-reduce per micro-batch), not after the step: see ModelRunner::train_step.
    ModelRunner::StopBefore stop_before;
    if (accum > 1 && !par.pipelined()) {
      stop_before = [&](std::int64_t) {
        return par.world->all_reduce_scalar(g_stop.load() ? 1.0 : 0.0, dist::ReduceOp::max) > 0;
      };
    }
    const std::optional<double> loss_of_step = runner.train_step(
        accum, [&] { return on_device(loader->next()); },
        [&](std::int64_t m) {
          nn::ForwardContext ctx;
          ctx.training = true;
          ctx.seed = static_cast<std::uint64_t>(config.train.seed);
          ctx.step = step;
          ctx.global_batch = global_batch;
          ctx.batch_offset = m * mb * dp + par.dp_rank * mb;
          ctx.compute_dtype = cdt;
          ctx.gatherer = gatherer;
          return ctx;
        },
        step_labels, loss_scale, stop_before);
    if (!loss_of_step) {
      // Stopped mid-step: the parameters, optimizer and data position are those before this step, which
      // the checkpoint records; a resume runs the whole step again, exactly.
      summary.last_checkpoint = save_checkpoint(ckpt_root, params, spec, par, state, config, config.data.tokenizer);
      log.message(fmt::format("saved checkpoint {}", summary.last_checkpoint));
      summary.interrupted = true;
      log.message(fmt::format("stopped by signal during step {} (of {} micro-batches); the checkpoint holds step {}; "
                              "resume with --resume",
                              step, accum, state.step));
      break;
    }
    const double step_loss = *loss_of_step;
    const double sumsq = runner.grad_sum_of_squares();
    const bool overflow = !std::isfinite(sumsq);
    const double grad_norm = std::sqrt(sumsq) / loss_scale;
    bool skipped = false;
    if (fp16) skipped = scaler.update(overflow);
    TRIDENT_CHECK(fp16 || std::isfinite(step_loss),
                  "training diverged at step {}: loss is {} (lower optim.lr or enable clipping)", step, step_loss);
    if (!skipped) {
      const double coef = optim::clip_coefficient(grad_norm, config.optim.clip_grad);
      if (par.zero) {
        par.zero->step(lr, coef / loss_scale);
      } else {
        par.optimizer->step(lr, coef / loss_scale);
      }
    }
    state.step = step;
    state.consumed_samples += global_batch;
    state.lr = lr;
    state.loss_scale = fp16 ? scaler.scale() : 0;
    state.loss_scale_good_steps = fp16 ? scaler.good_steps() : 0;
    summary.losses.push_back(step_loss);
    if (step == first_step + 1) summary.memory_after_first_step = memory_stats(device);

    synchronize(device);  // a GPU step has finished only when its queued kernels have
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
    mtr.mfu = flops_per_token * mtr.tokens_per_s / (peak_gflops * 1e9 * par.world->size());
    mtr.peak_memory_mb = static_cast<double>(memory_stats(device).peak) / (1 << 20);
    mtr.eta_s = elapsed / static_cast<double>(step - first_step) * static_cast<double>(config.train.steps - step);
    mtr.loss_scale = fp16 ? scaler.scale() : 0;
    mtr.skipped = skipped;
    log.log_step(mtr, step % config.train.log_interval == 0 || step == config.train.steps);

    if (do_eval && (step % config.train.eval_interval == 0 || step == config.train.steps)) {
      summary.val_losses.emplace_back(step, evaluate(step));
    }
    // A signal may reach only some ranks (Ctrl-C reaches all; kill one), and clocks differ: agree
    // before acting. 1: a signal; 2: train.exit_duration_minutes has passed.
    const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - job_start).count() / 60;
    const bool out_of_time = config.train.exit_duration_minutes > 0 && minutes >= config.train.exit_duration_minutes;
    const double why = par.world->all_reduce_scalar(out_of_time ? 2.0 : g_stop.load() ? 1.0 : 0.0,
                                                     dist::ReduceOp::max);
    const bool stop = why > 0;
    const bool at_interval = config.checkpoint.interval > 0 && step % config.checkpoint.interval == 0;
    if (stop || at_interval || step == config.train.steps) {
      summary.last_checkpoint = save_checkpoint(ckpt_root, params, spec, par, state, config, config.data.tokenizer);
      log.message(fmt::format("saved checkpoint {}", summary.last_checkpoint));
    }
    if (stop) {
      summary.interrupted = true;
      log.message(why > 1 ? fmt::format("stopped after step {}: train.exit_duration_minutes={} has passed; resume "
                                        "with --resume",
                                        step, config.train.exit_duration_minutes)
                          : fmt::format("stopped by signal after step {}; resume with --resume", step));
      break;
    }
  }
  summary.steps_done = state.step;
  log.finish();
  return summary;
}

}  // namespace trident::train
