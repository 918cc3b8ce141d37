#include "trident/train/run.h"

#include <fmt/ranges.h>
#include <xxhash.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "trident/core/atomic_file.h"
#include "trident/core/interrupt.h"
#include "trident/core/memory.h"
#include "trident/core/parallel.h"
#include "trident/dist/flight_recorder.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/dist/self_communicator.h"
#include "trident/kernels/cpu/matmul.h"
#include "trident/models/pretrained.h"
#include "trident/train/plan/memory_estimate.h"

namespace trident::train::detail {

namespace fs = std::filesystem;

// The registered optimizer optim.name with the optim.* values its entry reads (optim/registry.h).
optim::Method optimizer_method(const Config& config, const std::optional<std::pair<double, double>>& betas) {
  const optim::OptimizerDef& def = optim::optimizer_def(config.optim.name);
  optim::Settings settings;
  for (const std::string& key : def.keys) settings[key] = optim_setting(config, key);
  if (betas && settings.contains("betas")) settings["betas"] = {betas->first, betas->second};
  return def.from_settings(settings);
}

namespace {

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

void make_parallel(ParallelState& par, const Config& config, std::shared_ptr<dist::Communicator> world, Device device) {
  if (!world) world = dist::job_world(config.dist.timeout_s);
  validate_config(config, world->size());
  check_same_config(*world, config);
  const Layout layout{static_cast<int>(config.dist.tensor_parallel_size),
                      static_cast<int>(config.dist.pipeline_parallel_size),
                      static_cast<int>(config.dist.data_parallel_size),
                      static_cast<int>(config.dist.expert_parallel_size),
                      static_cast<int>(config.dist.context_parallel_size)};
  // GPU tensors travel over NCCL (host values over its MPI twin); the world
  // communicator stays MPI for the trainer's host-side agreement checks.
  const std::shared_ptr<dist::Communicator> groups_of = group_parent(world, device, config);
  static_cast<ParallelGroups&>(par) = make_groups(world, layout, groups_of);
  par.chunks = static_cast<int>(config.dist.virtual_pipeline_size);
  par.sequence_parallel = config.dist.sequence_parallel && par.tp_size > 1;
  par.zero_stage = static_cast<int>(config.dist.zero_stage);
  par.cp_all_to_all = config.dist.context_parallel_algorithm == "all_to_all";
}

// One optimizer for every stage: ZeRO partitions the state of the registered optimizer (and under
// stage 3 gathers the parameters the model runs); stage 0 updates replicated parameters, with
// GradSync's overlapped all-reduce when dp > 1. Under expert parallelism the experts are replicated
// over the expert-data-parallel group instead of the data-parallel one: ZeRO partitions them there (a
// second ZeroGroup), GradSync reduces them there. Under context parallelism each group takes in the cp
// ranks too (dp × cp, expert-dp × cp): they hold the same parameters and different tokens.
void make_optimizer(ParallelState& par, const Config& config, const std::vector<nn::Parameter*>& params) {
  const optim::Method method = optimizer_method(config);
  std::vector<nn::Parameter*> dense, experts;
  for (nn::Parameter* p : params) (p->expert_parallel ? experts : dense).push_back(p);
  if (par.zero_stage > 0) {
    TRIDENT_CHECK(experts.empty() || par.zero_stage == 1,
                  "dist.zero_stage={} with dist.expert_parallel_size={}: use ZeRO-1 or 0", par.zero_stage,
                  par.ep_size);
    std::vector<parallel::ZeroGroup> groups{{dense, par.dp_cp}};
    if (!experts.empty()) groups.push_back({experts, par.expert_dp_cp});
    auto zero = std::make_unique<parallel::ZeroOptimizer>(par.zero_stage, std::move(groups), method);
    par.zero = zero.get();
    if (par.zero_stage == 3) par.gatherer = zero.get();
    par.optimizer = std::move(zero);
    return;
  }
  par.optimizer = std::make_unique<optim::RuleOptimizer>(params, method);
  if (par.dp_cp_size > 1) {
    std::vector<parallel::GradGroup> groups{{dense, par.dp_cp}};
    if (!experts.empty()) groups.push_back({experts, par.expert_dp_cp});
    par.grad_sync = std::make_unique<parallel::GradSync>(std::move(groups), parallel::GradSyncOptions{});
  }
}

// A Slurm job started again by requeue (scontrol requeue, preemption with --requeue, a node failure):
// SLURM_RESTART_COUNT counts its restarts.
int slurm_restarts() {
  const char* v = std::getenv("SLURM_RESTART_COUNT");
  return v && *v ? std::atoi(v) : 0;
}

std::string resume_directory(const Config& config, const TrainOptions& options, const std::string& ckpt_root,
                             MetricsLogger& log) {
  // A requeued job resumes as checkpoint.resume = "auto" would (unless the config names a checkpoint):
  // the sbatch script that started it is the one that runs again.
  const bool requeued = slurm_restarts() > 0 && config.checkpoint.resume.empty() && !options.resume;
  if (requeued) {
    log.message(fmt::format("Slurm requeued this job (SLURM_RESTART_COUNT={}): resuming from the newest valid "
                            "checkpoint under '{}', if any",
                            slurm_restarts(), ckpt_root));
  }
  if (options.resume || config.checkpoint.resume == "auto" || requeued) {
    // The newest checkpoint whose files all verify: a crash mid-save never costs more than that save.
    std::vector<std::string> skipped;
    std::string dir = checkpoint::latest_valid_checkpoint(ckpt_root, &skipped);
    for (const std::string& why : skipped) log.message("skipping a checkpoint that does not verify: " + why);
    TRIDENT_CHECK(!dir.empty() || config.checkpoint.resume == "auto" || requeued, "--resume: no valid checkpoint found under '{}'",
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

// `trident train --run-dir R --resume` with no config file: the run's own R/config.toml (the resolved
// configuration it saved at its start) is the file, and --set goes on top of it.
TrainOptions with_run_config(TrainOptions options) {
  if (!options.config_path.empty() || !options.resume) return options;
  const fs::path saved = fs::path(options.run_dir) / "config.toml";
  std::error_code ec;
  TRIDENT_CHECK(fs::is_regular_file(saved, ec),
                "--resume without a config file reads the run's own config.toml, and '{}' has none (no run started "
                "in --run-dir '{}'): give the config file, or the --run-dir of the run to continue",
                options.run_dir, options.run_dir);
  options.config_path = saved.string();
  return options;
}

// The run directory's tag in its TensorBoard files' names: 8 hex digits of its absolute path's hash, so
// that a resume (from any working directory) knows its own run's files in a shared directory.
std::string run_tag(const std::string& run_dir) {
  std::error_code ec;
  fs::path abs = fs::weakly_canonical(fs::absolute(run_dir), ec);
  if (ec) abs = fs::absolute(run_dir);
  abs = abs.lexically_normal();
  if (abs.filename().empty()) abs = abs.parent_path();  // "runs/a/" names "runs/a"
  const std::string s = abs.string();
  return fmt::format("{:08x}", XXH32(s.data(), s.size(), 0));
}

// One training per run directory: rank 0, which writes it, holds the lock until the end. A refusal is
// passed to every rank, so all fail alike with the same line (printed once) and nobody waits; so is a
// metrics or TensorBoard file rank 0 cannot open.
void open_run_dir(Run& run, const TrainOptions& options) {
  const ParallelState& par = run.par;
  const LogConfig& log = run.config.log;
  const std::string metrics_path = (fs::path(run.run_dir) / log.metrics_file).string();
  // Relative to the run directory; an absolute path stays as it is.
  const std::string tensorboard_dir = log.tensorboard.empty() ? "" : (fs::path(run.run_dir) / log.tensorboard).string();
  std::string refused;
  if (par.is_root()) {
    try {
      run.lock = RunDirLock(run.run_dir);
      run.log = std::make_unique<MetricsLogger>(metrics_path, log.progress, !options.quiet, tensorboard_dir,
                                                run_tag(run.run_dir));
    } catch (const Error& e) {
      refused = e.message();
    }
  }
  refused = par.world->broadcast_text(refused);
  TRIDENT_CHECK(refused.empty(), "{}", refused);
  par.world->barrier();
  if (!par.is_root()) run.log = std::make_unique<MetricsLogger>(metrics_path, log.progress, false);
  for (const std::string& line : run.config_notes) run.log->message(line);
}

// The resolved configuration is the run directory's config.toml: the start names it in one line, and
// prints it whole only with --verbose.
void log_config(const Run& run, const TrainOptions& options) {
  const std::string saved = (fs::path(run.run_dir) / "config.toml").string();
  if (options.verbose) {
    run.log->message("# resolved configuration (also in " + saved + ")\n" + to_toml(run.config));
    return;
  }
  const std::string from = options.config_path.empty()  ? "resolved from the defaults and --set"
                           : options.config_path == saved ? "the run's own"
                                                          : "resolved from " + options.config_path;
  run.log->message(fmt::format("config: {} ({}; -v prints it)", saved, from));
}

// The model's sizes and the datasets, after every check that needs no allocation.
// data.reset_attention_mask / reset_position_ids split packed samples at end-of-document tokens: a
// decoder's packed samples only, with an end-of-document token, and positions that restart only where
// the model has positions (and no KV cache: training only).
void check_document_options(const Config& config, models::Objective objective, const data::Tokenizer& tokenizer,
                            const models::TransformerSpec& spec) {
  const bool attention = config.data.reset_attention_mask, positions = config.data.reset_position_ids;
  if (!attention && !positions) return;
  const std::string keys = attention && positions ? "data.reset_attention_mask and data.reset_position_ids"
                           : attention           ? "data.reset_attention_mask"
                                                 : "data.reset_position_ids";
  TRIDENT_CHECK(objective == models::Objective::next_token,
                "{} split packed samples at end-of-document tokens for a decoder; a {} model (model.arch='{}') trains "
                "on whole samples of one document or a pair: drop {}",
                keys, models::family(spec.family).display_name, spec.family, keys);
  TRIDENT_CHECK(config.data.packing,
                "{} split packed samples into their documents, but data.packing = false already gives each sample one "
                "document: drop {}",
                keys, keys);
  TRIDENT_CHECK(tokenizer.eod_id().has_value(),
                "{} split samples at end-of-document tokens, and the tokenizer '{}' has none ({})", keys,
                config.data.tokenizer, data::end_of_document_names_text());
}

void open_model_and_data(Run& run) {
  const Config& config = run.config;
  const std::int64_t mb = run.micro_batch, accum = run.accum, global_batch = run.global_batch, T = run.seq_len;
  const int dp = run.par.dp_size;
  data::Tokenizer tokenizer = data::Tokenizer::load(config.data.tokenizer);
  run.spec = with_token_ids(model_spec(config.model, tokenizer.vocab_size(), T), tokenizer);
  // config.toml and the checkpoints' copies record the model trained, and where each value came from.
  if (!config.model.from_pretrained.empty()) run.config.model = recorded_pretrained(config.model, run.spec);
  const models::TransformerSpec& spec = run.spec;
  TRIDENT_CHECK(T <= spec.max_seq_len, "train.seq_len={} exceeds the model's max_seq_len={}", T, spec.max_seq_len);
  TRIDENT_CHECK(tokenizer.vocab_size() <= spec.vocab_size,
                "model vocab_size={} is smaller than the tokenizer's {} tokens", spec.vocab_size,
                tokenizer.vocab_size());
  const models::Objective objective = models::family(spec.family).objective;
  TRIDENT_CHECK(!config.data.eod_mask_loss || objective == models::Objective::next_token,
                "data.eod_mask_loss = true masks the next-token loss after end-of-document tokens; a {} model "
                "(model.arch='{}') learns masked tokens instead: drop data.eod_mask_loss",
                models::family(spec.family).display_name, spec.family);
  TRIDENT_CHECK(!config.data.eod_mask_loss || tokenizer.eod_id().has_value(),
                "data.eod_mask_loss = true needs an end-of-document token, and the tokenizer '{}' has none ({})",
                config.data.tokenizer, data::end_of_document_names_text());
  check_document_options(config, objective, tokenizer, spec);
  // Sizes that cannot fit are refused before anything is allocated (or wraps around).
  const MemoryLayout memory = memory_layout(config, run.par.world->size());
  // On a GPU only the parameters pass through host memory (initialised there, then moved); the device's
  // own size is not queried here yet, so a GPU run is checked for its parameters only.
  check_memory_fits(config, spec, memory, host_memory_bytes(), "this host", run.device.is_cuda());
  // A step of more micro-batches than an epoch has samples would run for ever (and ignore signals until
  // it ends): surely a mistake.
  const std::int64_t epoch = accum > 1 || config.train.epochs ? epoch_samples(config, objective) : 0;
  if (accum > 1) {
    TRIDENT_CHECK(epoch == 0 || accum <= epoch,  // 0: no sample at all, which open_data names
                  "train.global_batch_size={} means {} accumulation steps (global_batch_size / (micro_batch_size {} × "
                  "data-parallel {})) per optimizer step, more than the {} samples of one epoch of the training data "
                  "(the bound)",
                  config.train.global_batch_size, accum, mb, dp, epoch);
  }
  std::int64_t train_samples = 0, valid_samples = 0;
  TRIDENT_CHECK(
      !__builtin_mul_overflow(config.train.steps, global_batch, &train_samples) &&
          !__builtin_mul_overflow(std::max<std::int64_t>(config.train.eval_steps, 1), global_batch, &valid_samples),
      "train.steps={} (or train.eval_steps={}) × the global batch of {} samples overflows a 64-bit count",
      config.train.steps, config.train.eval_steps, global_batch);
  if (config.train.epochs) {
    // A blend holds one epoch of the training set, which the loader reads again in a fresh order each
    // epoch (data::EpochOrder): train.epochs counts passes over it.
    run.epoch_samples = epoch;
    train_samples = epoch;
  }
  if (objective == models::Objective::masked_lm) {
    // The masks are drawn at global sample coordinates, so every layout masks the same tokens; a
    // tokenizer without a mask token is an error here, naming what was expected.
    try {
      run.loader_options.masking =
          data::masking_for_tokenizer(tokenizer, config.data.mlm_probability, config.data.whole_word_masking,
                                      static_cast<std::uint64_t>(config.train.seed));
      data::check_masking_options(*run.loader_options.masking);
    } catch (const Error& e) {
      TRIDENT_FAIL("data.tokenizer '{}': {}", config.data.tokenizer, e.message());
    }
  }
  run.data = open_data(config, std::move(tokenizer), train_samples, valid_samples, objective);
  const bool watched = config.checkpoint.keep_best > 0 || config.train.early_stopping_patience > 0;
  TRIDENT_CHECK(!watched || run.data.valid != nullptr,
                "{}={} compares {}, but the run has no validation data: give data.valid_paths, or a validation "
                "share in data.split (now '{}')",
                config.checkpoint.keep_best > 0 ? "checkpoint.keep_best" : "train.early_stopping_patience",
                config.checkpoint.keep_best > 0 ? config.checkpoint.keep_best : config.train.early_stopping_patience,
                config.checkpoint.monitor, config.data.split);
}

// This rank's chunks, initialised (and loaded) on the host, where the counter RNG runs, then moved.
void build_model(Run& run) {
  const Config& config = run.config;
  run.runner = std::make_unique<ModelRunner>(
      run.spec, run.par,
      ModelRunner::Options{config.dist.pipeline_num_layers,
                           parallel::pipeline::parse_schedule(config.dist.pipeline_schedule), run.micro_batch,
                           run.seq_len, run.compute_dtype, run.device,
                           run.data.train->padded() || config.data.reset_attention_mask ||
                               config.data.reset_position_ids,
                           config.data.reset_attention_mask, config.data.reset_position_ids});
  for (const auto& chunk : run.runner->chunks()) {
    chunk->initialize(static_cast<std::uint64_t>(config.train.seed));
    if (!config.model.from_pretrained.empty()) models::load_pretrained(*chunk, config.model.from_pretrained);
    chunk->to(run.device);
    chunk->set_activation_checkpointing(config.train.activation_checkpointing);
  }
  if (!config.model.from_pretrained.empty() && !models::is_sharded_save(config.model.from_pretrained)) {
    // Every rank finds the same names in the same files: a refusal stops all alike.
    const std::vector<std::string> unused = models::unused_hf_tensors(run.spec, config.model.from_pretrained);
    const std::string names = fmt::format("{} tensor(s) of '{}' that the {} model does not use: {}", unused.size(),
                                          config.model.from_pretrained, models::family(run.spec.family).display_name,
                                          fmt::join(unused, ", "));
    TRIDENT_CHECK(unused.empty() || !config.model.from_pretrained_strict,
                  "model.from_pretrained_strict = true refuses {} (set it to false to skip them with a warning)", names);
    if (!unused.empty()) run.log->message(fmt::format("warning: skipped {} (transformers skips them too; "
                                                      "model.from_pretrained_strict = true refuses them)", names));
  }
  if (!config.model.from_pretrained.empty()) {
    std::vector<std::string> over;
    for (const auto& [key, origin] : config.model.origin)
      if (origin.starts_with("given")) over.push_back(fmt::format("model.{} = {}", key, key_value(config, "model." + key)));
    run.log->message(fmt::format("loaded pretrained weights from {}; the model is its config.json's{} (config.toml "
                                 "records each value and its source)",
                                 config.model.from_pretrained,
                                 over.empty() ? "" : fmt::format(", except {}", fmt::join(over, ", "))));
  }
}

// The checkpoint to resume from ("" for a fresh run). Rank 0 chooses and the others follow: a rank that
// judged on its own after a transient read error could resume from an older step than the rest. Its
// refusals reach every rank, so all fail alike with one line.
std::string agree_resume_directory(Run& run, const TrainOptions& options) {
  const ParallelState& par = run.par;
  std::string chosen, refused;
  // A signal while rank 0 verifies the checkpoints (core/interrupt.h) stops every rank alike here.
  const std::string interrupted = "\x01interrupted";
  if (par.is_root()) {
    try {
      chosen = resume_directory(run.config, options, run.ckpt_root, *run.log);
      if (chosen.empty()) check_fresh_run(run.ckpt_root, run.spec);
    } catch (const Error& e) {
      refused = e.message();
      chosen.clear();
    } catch (const Interrupted&) {
      refused = interrupted;
    }
  }
  chosen = par.world->broadcast_text(chosen);
  refused = par.world->broadcast_text(refused);
  if (refused == interrupted) throw Interrupted(LongWait::checkpoint_load);
  TRIDENT_CHECK(refused.empty(), "{}", refused);
  return chosen;
}

// One line naming the settings that differ from those the checkpoint in `dir` was saved with
// ("optim.lr 0.003 → 0.001; train.steps 40 → 60"), and what that does to the learning rate of the next
// step: the checkpoint keeps the state, the configuration decides the rest (docs/guide/checkpoints.md,
// "What a resume keeps"). "" when nothing changed, or when the checkpoint has no config.toml this
// version reads.
std::string changed_settings(const std::string& dir, const Config& config, std::int64_t step) {
  const fs::path saved_path = fs::path(dir) / "config.toml";
  if (!fs::exists(saved_path)) return "";
  Config saved;
  try {
    apply_file(saved, saved_path.string());
  } catch (const Error&) {
    return "";  // written by another version: nothing to compare against
  }
  std::vector<std::string> changes;
  for (const ConfigKey& k : config_keys()) {
    // Resolved from train.epochs, which the comparison covers: the saved file holds no train.steps.
    if (k.key == "train.steps" && config.train.epochs && saved.train.epochs) continue;
    const std::string was = key_value(saved, k.key), now = key_value(config, k.key);
    if (was != now) changes.push_back(fmt::format("{} {} → {}", k.key, was.empty() ? "unset" : was, now.empty() ? "unset" : now));
  }
  if (changes.empty()) return "";
  const double lr_was = optim::learning_rate(schedule_options(saved), step + 1);
  const double lr_now = optim::learning_rate(schedule_options(config), step + 1);
  const std::string schedule =
      lr_was == lr_now
          ? fmt::format("step {}'s learning rate stays {:.3g}", step + 1, lr_now)
          : fmt::format("step {}'s learning rate is {:.3g}, where the checkpoint's settings give {:.3g}: the schedule "
                        "follows these settings",
                        step + 1, lr_now, lr_was);
  return fmt::format("changed since the checkpoint: {} ({})", fmt::join(changes, "; "), schedule);
}

// The model's weights before the optimizer exists (ZeRO-3 then keeps only its shards), the optimizer,
// then its state and the run's.
void resume_and_make_optimizer(Run& run, const std::string& resume_from) {
  std::unique_ptr<checkpoint::CheckpointReader> reader;
  if (!resume_from.empty()) {
    reader = std::make_unique<checkpoint::CheckpointReader>(resume_from);
    check_same_model(*reader, run.spec);
    load_model(*reader, run.params());
  }
  make_optimizer(run.par, run.config, run.params());
  // ZeRO-3 shards the parameters; the model gathers each unit's through the optimizer.
  for (const auto& chunk : run.runner->chunks()) chunk->set_parameter_gatherer(run.par.gatherer);
  const OptimConfig& o = run.config.optim;
  run.scaler = optim::DynamicLossScaler(o.initial_loss_scale, o.loss_scale_window, o.min_loss_scale,
                                        o.loss_scale_hysteresis);
  if (!reader) return;
  run.state = load_optimizer_and_state(*reader, run.params(), run.par);
  // With train.global_batch_size unset the global batch follows the layout (micro-batch × data-parallel
  // ranks): a resume on other ranks would silently train another batch. Every rank judges the same.
  const std::int64_t saved_global =
      run.state.step > 0 && run.state.consumed_samples % run.state.step == 0 ? run.state.consumed_samples / run.state.step
                                                                             : 0;
  TRIDENT_CHECK(run.config.train.global_batch_size > 0 || saved_global == 0 || saved_global == run.global_batch,
                "checkpoint {} trained {} samples per step, and with train.global_batch_size unset this layout "
                "would take {} (micro-batch {} × {} data-parallel ranks): set train.global_batch_size={} to continue "
                "the run unchanged (or to {} to change it)",
                resume_from, saved_global, run.global_batch, run.micro_batch, run.par.dp_size, saved_global,
                run.global_batch);
  if (run.fp16 && run.state.loss_scale > 0) {
    run.scaler.set_scale(run.state.loss_scale);
    run.scaler.set_good_steps(run.state.loss_scale_good_steps);
    // 0: a checkpoint from before the hysteresis was recorded (its scaler had none).
    if (run.state.loss_scale_hysteresis_left > 0) run.scaler.set_hysteresis_left(run.state.loss_scale_hysteresis_left);
  }
  run.log->message(fmt::format("resumed from {} at step {} ({} samples consumed)", resume_from, run.state.step,
                               run.state.consumed_samples));
  if (run.par.is_root()) {  // the rank that prints reads the checkpoint's config.toml
    if (const std::string changed = changed_settings(resume_from, run.config, run.state.step); !changed.empty())
      run.log->message(changed);
  }
  // The steps after the checkpoint are done again: their old lines go, so metrics.jsonl is one curve.
  run.log->truncate_after(run.state.step);
}

void log_description(const Run& run) {
  const Config& config = run.config;
  const ParallelState& par = run.par;
  const models::TransformerSpec& spec = run.spec;
  run.log->message(fmt::format(
      "trident: {} {} ({:.2f}M parameters), {} precision, {}, {} threads/rank, global batch {} × {} tokens "
      "(micro-batch {} × {} {} × {} data-parallel), ZeRO stage {}, on {}, matmul peak {:.0f} GFLOP/s",
      !config.model.preset.empty()            ? config.model.preset
      : !config.model.from_pretrained.empty() ? fmt::format("'{}'", config.model.from_pretrained)
                                              : spec.family,
      models::family(spec.family).display_name, static_cast<double>(spec.num_parameters()) / 1e6,
      config.train.precision, par.mesh->describe(), num_threads(), run.global_batch, run.seq_len, run.micro_batch,
      run.accum,
      par.pipelined() ? fmt::format("micro-batches through the {} pipeline schedule{}", config.dist.pipeline_schedule,
                                    par.chunks > 1 ? fmt::format(" ({} chunks per rank)", par.chunks) : "")
                      : std::string("accumulation"),
      par.dp_size, par.zero_stage, run.device, run.peak_gflops));
}

// The matmul peak the MFU column divides by, per rank. Every rank measures at once, after a barrier, so each
// sees the contention it will train under (ranks that share a host's cores split them); the average then
// makes peak × world the job's peak. Measured one rank at a time while others were still starting up, four
// ranks on two cores had reported MFU above 100%.
double measured_peak_gflops(const Run& run) {
  const std::shared_ptr<dist::Communicator>& world = run.par.world;
  if (world->size() > 1) world->barrier();
  const double mine = matmul_peak_gflops(run.device, run.compute_dtype);
  return world->size() > 1 ? world->all_reduce_scalar(mine, dist::ReduceOp::avg) : mine;
}

// The training stream from the run's position; middle pipeline stages need no data (they receive hidden states).
void open_loader(Run& run) {
  const Config& config = run.config;
  data::LoaderOptions& lo = run.loader_options;
  lo.micro_batch_size = run.micro_batch;
  lo.dp_rank = run.par.dp_rank;
  lo.dp_size = run.par.dp_size;
  lo.consumed_samples = run.state.consumed_samples;
  lo.seed = static_cast<std::uint64_t>(config.train.seed);
  lo.prefetch = static_cast<int>(config.data.prefetch);
  if (config.data.eod_mask_loss)
    lo.masked_input_token = *run.data.tokenizer.eod_id();  // checked in open_model_and_data
  if (config.data.reset_attention_mask || config.data.reset_position_ids)
    lo.document_end_token = *run.data.tokenizer.eod_id();  // likewise
  if (run.runner->reads_data()) {
    run.loader = std::make_unique<data::DataLoader>(run.data.train, lo);
    // The training stream's order, for counting the labels of each step under data.eod_mask_loss.
    run.train_order = std::make_unique<data::EpochOrder>(run.data.train->size(), lo.seed);
  }
  run.on_device = std::make_unique<BatchMover>(run.device);
}

}  // namespace

std::string Run::save_checkpoint() {
  std::string dir = detail::save_checkpoint(ckpt_root, params(), spec, par, state, config, config.data.tokenizer);
  log->message(fmt::format("saved checkpoint {}", dir));
  return dir;
}

double labels_in(const Run& run, const data::SampleSource& source, data::EpochOrder& order, std::int64_t first,
                 std::int64_t count) {
  return static_cast<double>(std::max<std::int64_t>(
      data::trained_labels(source, order, first, count, run.loader_options), 1));
}

namespace {

// The paths a run adds to its directory, noted before it opens it: those that did not exist then, which a
// run refused before its first step removes again (rank 0, which wrote them).
class NewRunFiles {
 public:
  NewRunFiles(const std::string& run_dir, const LogConfig& log) {
    const fs::path dir(run_dir);
    std::vector<fs::path> paths = {dir, dir / log.metrics_file, dir / "train.lock", dir / "config.toml"};
    if (!log.tensorboard.empty()) paths.push_back(dir / log.tensorboard);
    std::error_code ec;
    for (const fs::path& p : paths)
      if (!fs::exists(fs::symlink_status(p, ec))) new_.push_back(p);
  }
  // The run directory last, and only when nothing else is left in it.
  void remove() const noexcept {
    std::error_code ec;
    for (auto p = new_.rbegin(); p != new_.rend(); ++p) {
      if (*p == new_.front() && p + 1 == new_.rend()) {
        fs::remove(*p, ec);  // a directory that is not empty stays
      } else {
        fs::remove_all(*p, ec);
      }
    }
  }

 private:
  std::vector<fs::path> new_;
};

// The part of building a run after its directory is open: the model, the data, the resume and the loader.
void open_the_rest(Run& run, const TrainOptions& options) {
  const Config& config = run.config;
  run.micro_batch = config.train.micro_batch_size;
  run.accum = accumulation_steps(config, run.par.dp_size);
  run.global_batch = run.micro_batch * run.accum * run.par.dp_size;
  run.seq_len = config.train.seq_len;
  open_model_and_data(run);

  run.compute_dtype = compute_dtype(config.train.precision);
  run.fp16 = run.compute_dtype == DType::f16;
  build_model(run);
  resume_and_make_optimizer(run, agree_resume_directory(run, options));
  // Only now: a run refused above (another run's checkpoints, a bad resume) leaves the earlier config.toml.
  if (run.par.is_root()) write_file_atomically(fs::path(run.run_dir) / "config.toml", to_toml(config));
  log_config(run, options);

  run.peak_gflops = config.train.peak_gflops > 0 ? config.train.peak_gflops : measured_peak_gflops(run);
  log_description(run);
  run.schedule = schedule_options(config);
  open_loader(run);
  run.flops_per_token = run.runner->chunks().front()->flops_per_token(run.seq_len);
  run.tokens_per_step = static_cast<double>(run.global_batch * run.seq_len);
  run.tokens_before = run.data.train->padded() && run.loader
                          ? static_cast<double>(data::real_tokens(*run.data.train, *run.train_order, 0,
                                                                  run.state.consumed_samples, run.loader_options))
                          : run.tokens_per_step * static_cast<double>(run.state.step);
}

}  // namespace

std::unique_ptr<Run> build_run(const TrainOptions& given) {
  const TrainOptions options = with_run_config(given);
  auto run = std::make_unique<Run>();
  run->job_start = std::chrono::steady_clock::now();
  // The job's size before the configuration is final: a DeepSpeed config's batch keys are checked
  // against the data-parallel size (docs/deepspeed.md).
  std::shared_ptr<dist::Communicator> world = options.world;
  if (!world) {
    const Config plain = load_config(options.config_path, options.overrides);
    world = dist::job_world(plain.dist.timeout_s);
  }
  run->config = load_config(options.config_path, options.overrides, world->size(), &run->config_notes);
  if (const std::string steps = resolve_epochs(run->config, world->size()); !steps.empty())
    run->config_notes.push_back(steps);
  const Config& config = run->config;
  if (config.train.threads > 0) set_num_threads(static_cast<int>(config.train.threads));
  run->device = training_device(config);
  make_parallel(run->par, config, world, run->device);

  run->run_dir = options.run_dir;
  run->ckpt_root =
      config.checkpoint.dir.empty() ? (fs::path(run->run_dir) / "checkpoints").string() : config.checkpoint.dir;
  // The peer check of a timed-out collective reads the other ranks' notes here (docs: flight_recorder.h).
  if (world->size() > 1) dist::flight::set_directory((fs::path(run->run_dir) / "flight").string());
  // A run refused before its first step (its data, its tokenizer, its memory, its resume) leaves the run
  // directory as it found it: no empty metrics.jsonl or train.lock of a run that never was.
  const NewRunFiles added(run->run_dir, config.log);
  try {
    open_run_dir(*run, options);
    open_the_rest(*run, options);
  } catch (...) {
    if (run->par.is_root()) {
      run->log.reset();  // closes metrics.jsonl and the TensorBoard file
      added.remove();
    }
    throw;
  }
  return run;
}

}  // namespace trident::train::detail
