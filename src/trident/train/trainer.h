// The training loop: config → data, model, optimiser → steps, evaluation,
// metrics and checkpoints.
//
// One optimizer step consumes one global batch: accumulation_steps micro-
// batches per data-parallel rank. Each micro-batch's loss is its sum of token
// losses divided by the global batch's token count, so the accumulated
// gradient is exactly the gradient of the global-batch token mean whatever the
// micro-batch split (docs/numerics.md, "Global batch semantics and the loss").
#pragma once

#include <atomic>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/memory.h"
#include "trident/dist/communicator.h"
#include "trident/models/transformer_lm.h"
#include "trident/train/config/config.h"
#include "trident/train/log/metrics.h"

namespace trident::checkpoint {
class CheckpointReader;
}  // namespace trident::checkpoint

namespace trident::train {

struct TrainSummary;

// Where a run stands when its loop starts: this rank's place in the layout, the run's shape, and the step
// it starts from (the checkpoint's, on a resume).
struct RunInfo {
  int rank = 0;
  int world_size = 1;
  int dp_rank = 0, dp_size = 1;
  int tp_rank = 0, tp_size = 1;
  int pp_rank = 0, pp_size = 1;
  int cp_rank = 0, cp_size = 1;
  int ep_rank = 0, ep_size = 1;
  std::int64_t first_step = 0;  // the steps done before this run's first
  std::int64_t steps = 0;       // train.steps
  std::int64_t global_batch = 0;
  std::int64_t seq_len = 0;
  std::int64_t parameters = 0;  // the whole model's (every shard and stage counted once)
  std::string run_dir;
  std::string checkpoint_dir;   // checkpoint.dir, or RUN_DIR/checkpoints
};

// A program's hooks into the loop, named as Lightning's callbacks are (the Python package's callbacks
// call through one). Every rank calls its own observer at the same points, on the training thread,
// between steps; a hook that throws ends the run as an error would. wants_stop() is asked after each
// step's hooks: when any rank's says true, every rank stops after that step with a checkpoint
// (StopCause::requested), as Lightning's `trainer.should_stop = True`.
class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_train_start(const RunInfo&) {}
  // After every optimizer step (logged or not), with its metrics.
  virtual void on_train_batch_end(const StepMetrics&) {}
  // After an evaluation (at step 0 too): the validation loss, and the masked-LM accuracy of such models.
  virtual void on_validation_end(std::int64_t /*step*/, double /*loss*/, std::optional<double> /*mlm_accuracy*/) {}
  // After a checkpoint of `step` was written whole to `dir`.
  virtual void on_save_checkpoint(std::int64_t /*step*/, const std::string& /*dir*/) {}
  // Once the loop has ended, however it ended (not when the run failed).
  virtual void on_train_end(const TrainSummary&) {}
  virtual bool wants_stop() { return false; }
};

struct TrainOptions {
  std::string config_path;              // may be empty (defaults + overrides)
  std::vector<std::string> overrides;   // "section.key=value"
  std::string run_dir = "runs/default";
  bool resume = false;                  // continue from the run's latest checkpoint
  bool quiet = false;                   // no progress output (tests)
  bool verbose = false;                 // the start prints the whole resolved configuration (else its path)
  // The job's communicator; null = MPI's world when launched by mpirun/srun,
  // else a single process. Tests pass dist::self_communicator() to run the
  // single-process reference inside an MPI job.
  std::shared_ptr<dist::Communicator> world;
  // The program's hooks (null: none); it must outlive train().
  TrainObserver* observer = nullptr;
};

// Why train() returned.
enum class StopCause {
  completed,   // train.steps were done
  signal,      // SIGINT/SIGTERM (or request_stop) after saving: the run did not finish
  time_limit,  // train.exit_duration_minutes passed after saving: a deliberate stop
  early_stopping,  // train.early_stopping_patience evaluations without improvement, after saving: finished
  requested,   // the program's observer asked to stop (TrainObserver::wants_stop), after saving: deliberate
};

// `trident train`'s exit status for a run a signal stopped after its checkpoint: sysexits' EX_TEMPFAIL
// ("try again later"), so a preempted job does not pass for a finished one (Slurm's afterok).
inline constexpr int kExitInterrupted = 75;

struct TrainSummary {
  std::int64_t steps_done = 0;          // optimizer steps taken by the end
  std::vector<double> losses;           // training loss of every step run in this call
  std::vector<std::pair<std::int64_t, double>> val_losses;  // (step, val loss)
  std::vector<std::pair<std::int64_t, double>> val_mlm_accuracies;  // (step, accuracy): masked-LM models
  std::string last_checkpoint;          // "" when none was written
  bool interrupted = false;             // stopped by SIGINT/SIGTERM or train.exit_duration_minutes (after saving)
  StopCause stopped = StopCause::completed;
  MemoryStats memory_after_first_step;  // this rank's memory by category after its first step
  // After its last step, before that step's evaluation and checkpoint: its peak covers the steps (and the
  // evaluations and checkpoints of earlier steps). tests/train/plan_memory_test.cpp holds it to the plan.
  MemoryStats memory_after_last_step;
};

// Checks the cross-field rules of a config for a job of `world_size` ranks;
// errors name the keys and values involved.
void validate_config(const Config& config, int world_size);
// The part of validate_config that concerns the rank layout (dist.*, batch sizes against it, the
// pipeline schedule, expert parallelism), which `trident plan` applies to each layout it proposes.
void validate_layout(const Config& config, int world_size);
// The device train.device names for this rank: cpu, cuda:N, or for plain "cuda"
// the GPU of this rank's index on its node. A CUDA device without the CUDA
// backend or without a visible GPU is a clear error.
Device training_device(const Config& config);

// Runs training as configured. Installs SIGINT/SIGTERM handlers that stop at the
// next micro-batch boundary (all ranks agreeing; under a pipeline schedule at the
// end of the step), save a checkpoint and return (interrupted = true). A step
// stopped part-way is not taken: the checkpoint holds the state before it.
// Rank 0 holds RUN_DIR/train.lock for the whole run (one training per run
// directory); a resume checks that the checkpoint holds the configured model.
// A signal during a long wait of the set-up (the dataset's index build, the
// model's initialisation, a resume's load) throws trident::Interrupted
// (core/interrupt.h) there instead, within seconds, with nothing written.
TrainSummary train(const TrainOptions& options);

// Requests a graceful stop (what the signal handlers do); for tests.
void request_stop() noexcept;

// Fills every parameter of `model` (whole, or this rank's tensor-parallel
// shard) from checkpoint directory `dir`, whatever layout wrote it.
void load_checkpoint_weights(const std::string& dir, models::TransformerLM& model);
// The same from a checkpoint already open.
void load_checkpoint_weights(const checkpoint::CheckpointReader& reader, models::TransformerLM& model);

}  // namespace trident::train
