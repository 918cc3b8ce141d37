#include "trident/train/run_checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "trident/core/atomic_file.h"
#include "trident/core/interrupt.h"
#include "trident/models/hf.h"
#include "trident/models/pretrained.h"
#include "trident/train/config/model_options.h"
#include "trident/train/setup.h"

namespace trident::train::detail {

namespace fs = std::filesystem;

namespace {

// The learning-rate schedule, as meta.json records it (as Megatron's checkpoints do, for a reader).
nlohmann::json scheduler_meta(const Config& config, double lr) {
  const optim::ScheduleOptions o = schedule_options(config);
  nlohmann::json j = {{"lr", lr},
                      {"max_lr", o.peak_lr},
                      {"min_lr", o.min_lr},
                      {"warmup_steps", o.warmup_steps},
                      {"decay", config.schedule.decay},
                      {"decay_steps", o.decay_steps}};
  if (o.decay == optim::Decay::wsd) {
    j["wsd_decay_steps"] = o.wsd_decay_steps;
    j["wsd_decay_style"] = config.schedule.wsd_decay_style;
  }
  return j;
}

std::string shard_file(int rank) { return fmt::format("shard-{:05d}.safetensors", rank); }

const nn::Parameter& parameter_named(const std::vector<nn::Parameter*>& params, const std::string& name) {
  for (const nn::Parameter* q : params)
    if (q->name == name) return *q;
  TRIDENT_FAIL("checkpoint: state for '{}' belongs to no parameter of the model", name);
}

std::int64_t local_rows(const nn::Parameter& p) { return p.local_shape().rank() ? p.local_shape()[0] : 1; }

// The optimizer state this rank holds, each piece with the first row of its parameter: ZeRO's own
// rows, or a replicated optimizer's whole tensors (from row 0).
std::map<std::string, parallel::ZeroOptimizer::Shard> held_state(const ParallelState& par) {
  if (par.zero) return par.zero->owned_state();
  std::map<std::string, parallel::ZeroOptimizer::Shard> out;
  for (auto& [key, tensor] : par.optimizer->state()) out.emplace(key, parallel::ZeroOptimizer::Shard{tensor, 0});
  return out;
}

}  // namespace

std::string save_checkpoint(const std::string& root, const std::vector<nn::Parameter*>& params,
                            const models::TransformerSpec& spec, const ParallelState& par, const RunState& state,
                            const Config& config, const std::string& tokenizer_path) {
  const std::string final_dir = (fs::path(root) / fmt::format("step_{:08d}", state.step)).string();
  const std::string tmp = final_dir + ".tmp";
  if (par.is_root()) checkpoint::begin_checkpoint(final_dir);
  par.world->barrier();

  // Replicated parameters (and their state) are written by tensor-parallel rank 0 only; tied copies never.
  auto writes = [&](const nn::Parameter& p) { return !p.tied_copy && (p.tensor_parallel || par.tp_rank == 0); };
  std::vector<checkpoint::TensorPiece> pieces;
  // A parameter's first replica writes it: data-parallel rank 0 (for an expert under expert parallelism,
  // expert-data-parallel rank 0: each expert-parallel rank holds its own experts).
  if (par.zero_stage < 3) {
    for (const nn::Parameter* p : params)
      if (writes(*p) && par.replica_rank(*p) == 0) models::append_pieces(pieces, "model/" + p->name, *p, p->var.data());
  }
  // Partitioned state (ZeRO): every rank its rows; replicated state: the first replica.
  for (const auto& [key, shard] : held_state(par)) {
    const nn::Parameter& p = parameter_named(params, key.substr(key.find('/') + 1));
    if (writes(p) && (par.zero || par.replica_rank(p) == 0))
      models::append_pieces(pieces, key, p, shard.data, shard.row_offset);
  }
  checkpoint::write_shard((fs::path(tmp) / shard_file(par.rank)).string(), pieces);
  test_slow_wait(LongWait::checkpoint_write);  // the test of a signal during the write (core/interrupt.h)
  if (par.is_root()) {
    // Written and fsync'd like the shards (errors checked): meta.json will
    // record their checksums, and a commit must not outlive its files.
    write_file_atomically(fs::path(tmp) / "config.toml", to_toml(config));
    write_file_atomically(fs::path(tmp) / "config.json", models::hf_config_json(spec));
    write_file_atomically(fs::path(tmp) / "tokenizer.json", read_whole_file(tokenizer_path, "tokenizer"));
  }
  par.world->barrier();
  if (par.is_root()) {
    std::vector<std::string> files = {"config.toml", "config.json", "tokenizer.json"};
    for (int r = 0; r < par.world->size(); ++r) files.push_back(shard_file(r));
    nlohmann::json meta = {{"step", state.step},
                           {"consumed_samples", state.consumed_samples},
                           {"optimizer_step", par.optimizer_steps()},
                           {"loss_scale", state.loss_scale},
                           {"loss_scale_good_steps", state.loss_scale_good_steps},
                           {"loss_scale_hysteresis_left", state.loss_scale_hysteresis_left},
                           {"seed", config.train.seed},
                           // Every random draw is a pure function of (seed, step, global coordinates).
                           {"rng", {{"generator", "philox4x32-10, counter-based"},
                                    {"seed", config.train.seed},
                                    {"step", state.step}}},
                           {"scheduler", scheduler_meta(config, state.lr)},
                           {"layout",
                            {{"world_size", par.world->size()},
                             {"dp", par.dp_size},
                             {"tp", par.tp_size},
                             {"pp", par.pp_size},
                             {"cp", par.cp_size},
                             {"virtual_pipeline_size", par.chunks},
                             {"pipeline_schedule", config.dist.pipeline_schedule},
                             {"sequence_parallel", par.sequence_parallel},
                             {"zero_stage", par.zero_stage}}},
                           {"monitor", monitor_json(state.monitor, config)},
                           {"config", to_toml(config)}};
    checkpoint::commit_checkpoint(tmp, final_dir, meta, files, (fs::path(root) / "latest").string());
    std::vector<std::string> best;
    if (config.checkpoint.keep_best > 0) {
      best = kept_best_names(state.monitor);
      // `best` as `latest`: replaced atomically, after the checkpoint it names is committed and before the one
      // it named can be pruned. A resume from another directory's checkpoint may list best ones this
      // directory lacks: it names the best one present.
      const auto present = std::find_if(best.begin(), best.end(), [&](const std::string& name) {
        return fs::exists(fs::path(root) / name / "meta.json");
      });
      if (present != best.end()) {
        write_file_atomically(fs::path(root) / "best", *present + "\n");
        checkpoint::crash_point("best updated");
      }
    }
    checkpoint::prune_checkpoints(root, config.checkpoint.keep, final_dir, best);
  }
  par.world->barrier();
  return final_dir;
}

namespace {

// "model.n_layer: checkpoint step_… has 4, the configuration has 2" for the first model option (in the
// table's order) of the checkpoint in `dir` (its config.json) that differs from `spec`; "" when none does.
std::string model_difference(const std::string& dir, const models::TransformerSpec& spec) {
  const fs::path config_json = fs::path(dir) / "config.json";
  const std::string name = fs::path(dir).filename().string();
  TRIDENT_CHECK(fs::exists(config_json),
                "checkpoint {} has no config.json: cannot tell whether it holds the configured model", dir);
  const models::TransformerSpec saved = models::read_hf_config(config_json.string());
  // The options' table marks what a resume must match: the sizes, and the numerics (a resume of a fine-tuning
  // run whose source config.json changed since must not continue with another RoPE base or norm epsilon).
  for (const ModelOption& o : model_options()) {
    if (!o.resume_must_match) continue;
    const OptionValue had = o.compared(saved), has = o.compared(spec);
    if (had != has)
      return fmt::format("model.{}: checkpoint {} has {}, the configuration has {}", o.name, name, to_string(had),
                         to_string(has));
  }
  return "";
}

}  // namespace

void check_same_model(const checkpoint::CheckpointReader& reader, const models::TransformerSpec& spec) {
  const std::string diff = model_difference(reader.dir(), spec);
  TRIDENT_CHECK(diff.empty(),
                "{} (a resume continues the same model; only the layout, dist.*, may change: train another model in "
                "another run directory)",
                diff);
}

void check_fresh_run(const std::string& root, const models::TransformerSpec& spec) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  std::string newest;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !name.starts_with("step_") || name.find('.') != std::string::npos) continue;
    if (!fs::exists(entry.path() / "meta.json") && !fs::exists(entry.path() / "config.json")) continue;
    newest = std::max(newest, name);
    if (!fs::exists(entry.path() / "config.json")) continue;
    std::string diff;
    try {
      diff = model_difference(entry.path().string(), spec);
    } catch (const Error&) {
      continue;  // unreadable: the refusal below still names the directory
    }
    TRIDENT_CHECK(diff.empty(),
                  "{}: '{}' holds another model's checkpoints, which this new run would replace and rotate away; "
                  "give another --run-dir (or checkpoint.dir), or move them aside",
                  diff, root);
  }
  TRIDENT_CHECK(newest.empty(),
                "'{}' holds an earlier run's checkpoints (the newest: {}), which this new run would replace and "
                "rotate away: continue that run with --resume (or checkpoint.resume = \"auto\"), or give another "
                "--run-dir (or checkpoint.dir), or move them aside",
                root, newest);
}

void load_model(const checkpoint::CheckpointReader& reader, const std::vector<nn::Parameter*>& params) {
  for (nn::Parameter* p : params) {
    interruption_point(LongWait::checkpoint_load);  // a signal abandons the resume (nothing written yet)
    p->var.data().copy_from(models::read_local_rows(reader, "model/" + p->name, *p, 0, local_rows(*p), p->var.dtype()));
    p->var.mark_data_changed();
  }
}

RunState load_optimizer_and_state(const checkpoint::CheckpointReader& reader,
                                  const std::vector<nn::Parameter*>& params, ParallelState& par) {
  const auto& meta = reader.meta();
  auto param_of = [&](const std::string& key) -> const nn::Parameter& {
    return parameter_named(params, key.substr(key.find('/') + 1));
  };
  const auto read = [&](const std::string& key, std::int64_t row_begin, std::int64_t rows, DType dtype) {
    return models::read_local_rows(reader, key, param_of(key), row_begin, rows, dtype);
  };
  if (par.zero) {
    par.zero->load_owned_state(read);
  } else {  // every state tensor whole, in its dtype
    std::map<std::string, Tensor> loaded;
    for (const auto& [key, tensor] : par.optimizer->state())
      loaded[key] = read(key, 0, tensor.rank() ? tensor.shape()[0] : 1, tensor.dtype());
    par.optimizer->load_state(loaded);
  }
  par.optimizer->set_step(meta.value("optimizer_step", std::int64_t{0}));
  TRIDENT_CHECK(meta.contains("step") && meta.contains("consumed_samples"),
                "checkpoint '{}': meta.json records no step or consumed_samples: not a training checkpoint",
                reader.dir());
  RunState rs;
  rs.step = meta.at("step").get<std::int64_t>();
  rs.consumed_samples = meta.at("consumed_samples").get<std::int64_t>();
  rs.loss_scale = meta.value("loss_scale", 0.0);
  rs.loss_scale_good_steps = meta.value("loss_scale_good_steps", std::int64_t{0});
  rs.loss_scale_hysteresis_left = meta.value("loss_scale_hysteresis_left", std::int64_t{0});
  rs.monitor = monitor_from_meta(meta, (fs::path(reader.dir()) / "meta.json").string());
  return rs;
}

}  // namespace trident::train::detail
