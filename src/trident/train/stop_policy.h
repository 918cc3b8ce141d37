// Internal to the train module: when a run stops before train.steps.
//
// Five things end a run early: SIGINT/SIGTERM (or request_stop),
// train.exit_duration_minutes passing, early stopping (best_checkpoints.h), and
// the program's own request (TrainObserver::wants_stop, a callback's). A signal may reach only some ranks
// (Ctrl-C reaches all; kill one) and clocks differ, so the ranks agree before
// acting: each contributes its reason and all act on the largest (one scalar
// all-reduce over the world). Early stopping is decided from the validation
// loss, which every rank holds, so the ranks agree already; it goes through the
// same all-reduce all the same, so that no rank can stop alone. After a step
// early stopping (the run is finished) outranks the time limit, which outranks a signal, which
// outranks the program's request;
// between the micro-batches of a step and the batches of an evaluation only
// signals count (see ModelRunner::train_step and Evaluator::evaluate).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "trident/core/interrupt.h"
#include "trident/dist/communicator.h"

namespace trident::train::detail {

// Ordered: the agreed reason is the largest any rank has.
enum class StopReason { none = 0, requested = 1, signal = 2, time_limit = 3, early_stopping = 4 };

// This rank's reason after a step, from its inputs: whether early stopping's patience ran out, then
// `minutes` since the job started against train.exit_duration_minutes (`limit_minutes`, 0 = none), then
// whether a stop was requested (a signal, request_stop), then the program's request (`program_stop`).
StopReason stop_reason(bool requested, double minutes, double limit_minutes, bool early_stop = false,
                       bool program_stop = false);
// The reason every rank of `world` acts on: the largest of theirs.
StopReason agree_stop(dist::Communicator& world, StopReason mine);

// Whether SIGINT/SIGTERM or request_stop() asked for a stop since the current StopPolicy was made.
bool stop_requested() noexcept;

// While it lives, SIGINT and SIGTERM ask for a stop (stop_requested()) instead of ending the process: the
// first signal asks for a checkpoint and a clean stop; the handler then steps aside, so a second one ends a
// stop that hangs. Clears a pending request when made. The long waits of the set-up (core/interrupt.h)
// give up with trident::Interrupted at their interruption points meanwhile. Not copyable: one at a time.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  using Handler = void (*)(int);
  Handler int_, term_;
  InterruptionScope interruptible_;
};

// The stop policy of one training. Made alone, it handles the signals itself (a StopSignals of its own);
// made with `signals` (which must outlive it), it acts on a request made since those were installed, so
// that a signal during the set-up before it is not lost.
class StopPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  // `steps`: train.steps; `limit_minutes`: train.exit_duration_minutes (0 = none), counted from `job_start`.
  StopPolicy(dist::Communicator& world, std::int64_t steps, double limit_minutes, Clock::time_point job_start);
  StopPolicy(dist::Communicator& world, std::int64_t steps, double limit_minutes, Clock::time_point job_start,
             const StopSignals& signals);
  StopPolicy(const StopPolicy&) = delete;
  StopPolicy& operator=(const StopPolicy&) = delete;

  // The step limit: true once `step` optimizer steps are done.
  bool reached_step_limit(std::int64_t step) const noexcept { return step >= steps_; }
  // Whether a stop was requested on any rank (all ranks agree: one scalar all-reduce). Asked before
  // micro-batch m >= 1 of a step and between the global batches of an evaluation.
  bool signalled();
  // After a step: the reason every rank stops for, or none. `early_stop`: this rank's early-stopping verdict.
  // `program_stop`: this rank's observer asked to stop (TrainObserver::wants_stop).
  StopReason after_step(bool early_stop = false, bool program_stop = false);

 private:
  dist::Communicator& world_;
  std::int64_t steps_;
  double limit_minutes_;
  Clock::time_point job_start_;
  std::optional<StopSignals> own_signals_;
};

}  // namespace trident::train::detail
