#include "trident/train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "trident/core/memory.h"
#include "trident/train/best_checkpoints.h"
#include "trident/train/evaluate.h"
#include "trident/train/log/metrics.h"
#include "trident/train/run.h"
#include "trident/train/step.h"
#include "trident/train/stop_policy.h"

namespace trident::train {

using namespace detail;

void load_checkpoint_weights(const std::string& dir, models::TransformerLM& model) {
  load_checkpoint_weights(checkpoint::CheckpointReader(dir), model);
}

void load_checkpoint_weights(const checkpoint::CheckpointReader& reader, models::TransformerLM& model) {
  load_model(reader, model.parameters());
}

namespace {
// TRIDENT_TEST_SLOW_RANK="R:MS" makes world rank R sleep MS milliseconds in every step, for the test of
// the straggler report.
std::optional<double> test_slow_rank_delay(int rank) {
  const char* spec = std::getenv("TRIDENT_TEST_SLOW_RANK");
  if (spec == nullptr) return std::nullopt;
  const std::string s(spec);
  const auto colon = s.find(':');
  TRIDENT_CHECK(colon != std::string::npos, "TRIDENT_TEST_SLOW_RANK='{}': expected RANK:MILLISECONDS", s);
  if (std::stoi(s.substr(0, colon)) != rank) return std::nullopt;
  return std::stod(s.substr(colon + 1)) / 1e3;
}
// The run's last line, as a DeepSpeed or Lightning script ends its job: the wall time since the start (set-up
// included), the tokens this run trained on and since step 0, and the last training and validation losses.
std::string end_of_run(const Run& run, const TrainSummary& s, std::int64_t first_step) {
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - run.job_start).count();
  // Real tokens: padding is not counted.
  std::string line = fmt::format("end of run: steps {}-{} in {} ({:.1f} min), {} tokens ({} since step 0)",
                                 first_step + 1, s.steps_done, format_duration(wall), wall / 60,
                                 static_cast<std::int64_t>(run.tokens_trained),
                                 static_cast<std::int64_t>(run.tokens_before + run.tokens_trained));
  if (!s.losses.empty()) line += fmt::format(" | final loss {:.4f}", s.losses.back());
  if (!s.val_losses.empty()) line += fmt::format(" | final val loss {:.4f}", s.val_losses.back().second);
  return line;
}

// Ends the run for a signal: a checkpoint of the state as it stands when `save` (the state after the last
// whole step), the flags the command's exit status reads, and the line that says where it stopped.
void stop_for_signal(Run& run, TrainSummary& s, bool save, const std::string& line) {
  if (save) s.last_checkpoint = run.save_checkpoint();
  s.interrupted = true;
  s.stopped = StopCause::signal;
  run.log->message(line);
}

RunInfo run_info(const Run& run) {
  const ParallelState& p = run.par;
  return {.rank = p.rank,
          .world_size = p.world->size(),
          .dp_rank = p.dp_rank,
          .dp_size = p.dp_size,
          .tp_rank = p.tp_rank,
          .tp_size = p.tp_size,
          .pp_rank = p.pp_rank,
          .pp_size = p.pp_size,
          .cp_rank = p.cp_rank,
          .cp_size = p.cp_size,
          .ep_rank = p.ep_rank,
          .ep_size = p.ep_size,
          .first_step = run.state.step,
          .steps = run.config.train.steps,
          .global_batch = run.global_batch,
          .seq_len = run.seq_len,
          .parameters = static_cast<std::int64_t>(models::parameter_count(run.spec)),
          .run_dir = run.run_dir,
          .checkpoint_dir = run.ckpt_root};
}

TrainSummary train_loop(const TrainOptions& options, TrainObserver& observer);

// The program's observer, or one that does nothing.
TrainObserver& observer_of(const TrainOptions& options) {
  static TrainObserver none;
  return options.observer != nullptr ? *options.observer : none;
}

}  // namespace

TrainSummary train(const TrainOptions& options) {
  TrainObserver& observer = observer_of(options);
  TrainSummary summary = train_loop(options, observer);
  observer.on_train_end(summary);
  return summary;
}

namespace {

TrainSummary train_loop(const TrainOptions& options, TrainObserver& observer) {
  const StopSignals signals;  // from here on: a signal during the set-up is acted on once the ranks can agree
  const std::unique_ptr<Run> built = build_run(options);
  Run& run = *built;
  const Config& config = run.config;
  std::optional<Evaluator> evaluator;
  if (run.data.valid && config.train.eval_interval > 0) evaluator.emplace(run);
  if (!run.data.valid && config.train.eval_interval > 0) {
    run.log->message(fmt::format("no evaluation will run: train.eval_interval={} asks for one, but the run has no "
                                 "validation data (data.split '{}' leaves no validation documents and "
                                 "data.valid_paths is empty); give data.valid_paths or a validation share in "
                                 "data.split, or set train.eval_interval=0",
                                 config.train.eval_interval, config.data.split));
  }

  TrainSummary summary;
  observer.on_train_start(run_info(run));
  StopPolicy stop(*run.par.world, config.train.steps, config.train.exit_duration_minutes, run.job_start, signals);
  if (stop.signalled()) {
    summary.steps_done = run.state.step;
    stop_for_signal(
        run, summary, false,
        fmt::format("stopped by signal during the set-up, before step {}: nothing new to save", run.state.step + 1));
    run.log->finish();
    return summary;
  }
  // A signal during an evaluation is acted on at its next global batch (all ranks agreeing there).
  const auto signalled = [&stop] { return stop.signalled(); };
  if (evaluator && run.state.step == 0) {
    const std::optional<double> loss = evaluator->evaluate(signalled);
    if (!loss) {
      stop_for_signal(run, summary, false,
                      "stopped by signal during the evaluation at step 0, before any training step: nothing to save");
      run.log->finish();
      return summary;
    }
    summary.val_losses.emplace_back(0, *loss);
    if (evaluator->mlm_accuracy()) summary.val_mlm_accuracies.emplace_back(0, *evaluator->mlm_accuracy());
    run.log->log_eval(0, *loss, evaluator->mlm_accuracy());
    observer.on_validation_end(0, *loss, evaluator->mlm_accuracy());
  }

  // A run resumed from the checkpoint early stopping saved is finished (a larger patience continues it).
  if (patience_exhausted(run.state.monitor, config) && run.state.step < config.train.steps) {
    summary.stopped = StopCause::early_stopping;
    summary.steps_done = run.state.step;
    run.log->message(early_stop_message(run.state.monitor, config, run.state.step) +
                     " (already, at the checkpoint resumed from: raise train.early_stopping_patience to go on)");
    run.log->finish();
    return summary;
  }

  const auto run_start = std::chrono::steady_clock::now();
  const std::int64_t first_step = run.state.step;
  reset_peak_memory(run.device);
  // A signal during a long step is acted on at the next micro-batch boundary (all ranks agreeing there;
  // one scalar all-reduce per micro-batch), not after the step: see ModelRunner::train_step.
  ModelRunner::StopBefore stop_before;
  if (run.accum > 1 && !run.par.pipelined()) stop_before = [&stop](std::int64_t) { return stop.signalled(); };

  const std::optional<double> test_delay_s = test_slow_rank_delay(run.par.world->rank());
  while (!stop.reached_step_limit(run.state.step)) {
    const auto t0 = std::chrono::steady_clock::now();
    const double blocked_before = dist::blocked_seconds();
    if (test_delay_s) std::this_thread::sleep_for(std::chrono::duration<double>(*test_delay_s));
    const std::optional<StepResult> result = train_step(run, stop_before);
    if (!result) {
      // Stopped mid-step: the parameters, optimizer and data position are those before this step, which
      // the checkpoint records; a resume runs the whole step again, exactly.
      stop_for_signal(run, summary, true,
                      fmt::format("stopped by signal during step {} (of {} micro-batches); the checkpoint holds "
                                  "step {}; resume with --resume",
                                  run.state.step + 1, run.accum, run.state.step));
      break;
    }
    const std::int64_t step = run.state.step;
    summary.losses.push_back(result->loss);
    run.tokens_trained += result->tokens;
    if (step == first_step + 1) summary.memory_after_first_step = memory_stats(run.device);
    summary.memory_after_last_step = memory_stats(run.device);  // before this step's evaluation and checkpoint

    synchronize(run.device);  // a GPU step has finished only when its queued kernels have
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - t0).count();
    const double elapsed = std::chrono::duration<double>(now - run_start).count();
    const bool logged = step % config.train.log_interval == 0 || step == config.train.steps;
    StepMetrics metrics = step_metrics(run, *result, dt, elapsed, first_step);
    if (logged && run.par.world->size() > 1)
      metrics.straggler = straggler_report(run, dt - (dist::blocked_seconds() - blocked_before));
    run.log->log_step(metrics, logged);
    observer.on_train_batch_end(metrics);

    const bool evaluated = evaluator && (step % config.train.eval_interval == 0 || step == config.train.steps);
    if (evaluated) {
      const std::optional<double> loss = evaluator->evaluate(signalled);
      if (!loss) {
        stop_for_signal(run, summary, true,
                        fmt::format("stopped by signal during the evaluation after step {}; the checkpoint holds "
                                    "step {} (its evaluation left out); resume with --resume",
                                    step, step));
        break;
      }
      summary.val_losses.emplace_back(step, *loss);
      if (evaluator->mlm_accuracy()) summary.val_mlm_accuracies.emplace_back(step, *evaluator->mlm_accuracy());
      run.log->log_eval(step, *loss, evaluator->mlm_accuracy());
      observer.on_validation_end(step, *loss, evaluator->mlm_accuracy());
      // Recorded in the state the checkpoint of this step saves (best_checkpoints.h).
      observe(run.state.monitor, config, step, summary.val_losses.back().second);
    }
    // Early stopping at the last step changes nothing: the run completed.
    const bool early_stop = evaluated && step < config.train.steps && patience_exhausted(run.state.monitor, config);
    const StopReason why = stop.after_step(early_stop, observer.wants_stop());
    const bool at_interval = config.checkpoint.interval > 0 && step % config.checkpoint.interval == 0;
    // With checkpoint.keep_best every evaluated step is saved, as Lightning's ModelCheckpoint(monitor=...)
    // saves after each validation: each evaluation is a candidate for the best k.
    const bool best_candidate = evaluated && config.checkpoint.keep_best > 0;
    if (why != StopReason::none || at_interval || best_candidate || step == config.train.steps) {
      summary.last_checkpoint = run.save_checkpoint();
      observer.on_save_checkpoint(step, summary.last_checkpoint);
      // A signal during the write stops the run now, with that checkpoint, not after the next step.
      if (why == StopReason::none && step < config.train.steps && stop.signalled()) {
        stop_for_signal(run, summary, false,
                        fmt::format("stopped by signal while the checkpoint of step {} was written; the checkpoint "
                                    "holds step {}; resume with --resume",
                                    step, step));
        break;
      }
    }
    if (why == StopReason::early_stopping) {
      summary.stopped = StopCause::early_stopping;
      run.log->message(early_stop_message(run.state.monitor, config, step));
      break;
    }
    if (why == StopReason::requested) {
      summary.stopped = StopCause::requested;
      run.log->message(fmt::format("stopped after step {}: the program's callback asked to stop; resume with --resume "
                                   "to go on",
                                   step));
      break;
    }
    if (why != StopReason::none) {
      summary.interrupted = true;
      summary.stopped = why == StopReason::time_limit ? StopCause::time_limit : StopCause::signal;
      run.log->message(why == StopReason::time_limit
                           ? fmt::format("stopped after step {}: train.exit_duration_minutes={} has passed; resume "
                                         "with --resume",
                                         step, config.train.exit_duration_minutes)
                           : fmt::format("stopped by signal after step {}; resume with --resume", step));
      break;
    }
  }
  summary.steps_done = run.state.step;
  if (summary.steps_done > first_step) run.log->message(end_of_run(run, summary, first_step));
  run.log->finish();
  return summary;
}

}  // namespace

}  // namespace trident::train
