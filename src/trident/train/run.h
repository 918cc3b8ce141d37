// Internal to the train module: building a run. A Run is everything one rank's
// training holds between steps: the parallel layout, the run directory (its
// lock and metrics log), the model (ModelRunner), the optimizer (in
// ParallelState), the data and its loader, the loss scaler and the RunState a
// resume restored. train::train builds one with build_run and then loops over
// the other pieces: train_step (step.h), Evaluator (evaluate.h), StopPolicy
// (stop_policy.h) and Run::save_checkpoint (run_checkpoint.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "trident/data/dataset/loader.h"
#include "trident/optim/loss_scaler.h"
#include "trident/optim/schedule.h"
#include "trident/train/device.h"
#include "trident/train/log/metrics.h"
#include "trident/train/model_runner.h"
#include "trident/train/parallel_state.h"
#include "trident/train/run_checkpoint.h"
#include "trident/train/run_lock.h"
#include "trident/train/setup.h"
#include "trident/train/trainer.h"

namespace trident::train::detail {

// Members are declared in the order they are built (and destroyed in reverse):
// the model runner and the loader go before the layout and the data they use.
struct Run {
  Run() = default;
  Run(const Run&) = delete;  // the model runner holds a reference to `par`
  Run& operator=(const Run&) = delete;

  std::chrono::steady_clock::time_point job_start;  // when train() was called (train.exit_duration_minutes)
  Config config;
  std::vector<std::string> config_notes;  // the DeepSpeed config's mapping, one line per key (logged at start)
  Device device = Device::cpu();
  ParallelState par;
  std::string run_dir;
  std::string ckpt_root;  // checkpoint.dir, or RUN_DIR/checkpoints
  RunDirLock lock;        // rank 0 only
  std::unique_ptr<MetricsLogger> log;

  // One optimizer step: `accum` micro-batches of `micro_batch` samples on each of the data-parallel ranks.
  std::int64_t micro_batch = 0;
  std::int64_t accum = 0;
  std::int64_t global_batch = 0;
  std::int64_t seq_len = 0;
  DType compute_dtype = DType::f32;
  bool fp16 = false;

  models::TransformerSpec spec;
  DataSources data;
  std::unique_ptr<ModelRunner> runner;
  optim::DynamicLossScaler scaler;
  RunState state;  // where the run stands: after build_run, the resumed step (0 for a fresh run)

  optim::ScheduleOptions schedule;
  data::LoaderOptions loader_options;             // the training stream's (the validation stream derives its own)
  std::unique_ptr<data::DataLoader> loader;       // null on middle pipeline stages (they read no data)
  std::unique_ptr<data::EpochOrder> train_order;  // with `loader`: counts each step's labels
  std::unique_ptr<BatchMover> on_device;
  double peak_gflops = 0;      // train.peak_gflops, or the measured matmul peak
  double flops_per_token = 0;  // of this rank's first chunk
  double tokens_per_step = 0;  // global_batch × seq_len: the tokens a step computes
  // The real tokens (not padding) trained before this run's first step, and in its steps so far.
  double tokens_before = 0;
  double tokens_trained = 0;
  std::int64_t epoch_samples = 0;  // with train.epochs: the samples of one epoch (0 without)
  std::vector<std::string> rank_hosts;  // each world rank's host, gathered at the first straggler report

  const std::vector<nn::Parameter*>& params() const { return runner->parameters(); }
  // Writes a checkpoint of `state` (every rank takes part), logs it and returns its directory.
  std::string save_checkpoint();
};

// Loads the configuration of `options` and builds the run: the layout (checking every rank resolved the
// same configuration), the run directory's lock and log, the data, the model (initialised, or loaded from
// model.from_pretrained), the checkpoint to resume from (its weights, optimizer and RunState), the
// optimizer and the training loader; logs the one-line description of the run. Errors that depend on the
// configuration name its keys.
std::unique_ptr<Run> build_run(const TrainOptions& options);

// The labels global samples [first, first + count) of `source` train: the divisor of their summed losses
// (the token mean over them, whatever the layout), at least 1.
double labels_in(const Run& run, const data::SampleSource& source, data::EpochOrder& order, std::int64_t first,
                 std::int64_t count);

}  // namespace trident::train::detail
