// Internal to the train module: one optimizer step of a Run.
//
// A step zeroes the gradients, runs the global batch's micro-batches
// (ModelRunner::train_step: forward, backward and the gradient reductions),
// measures the gradient norm, lets the fp16 loss scaler skip an overflowing
// step, clips and calls the optimizer once, whatever the ZeRO stage.
#pragma once

#include <optional>

#include "trident/train/log/metrics.h"
#include "trident/train/run.h"

namespace trident::train::detail {

struct StepResult {
  double loss = 0;       // the global batch's token-mean loss, the same on every rank
  double lr = 0;         // the learning rate of the step
  double grad_norm = 0;  // of the whole model's (un-scaled) gradient
  bool skipped = false;  // fp16: an overflow skipped the update
  double tokens = 0;     // the real tokens of the global batch (padding left out), what tokens/s counts
  std::optional<StepMetrics::MoE> moe;  // mixture-of-experts statistics (absent for a dense model)
};

// The forward context of micro-batch `m` of optimizer step `step`: dropout addressed by the sample's
// place in the global batch, whatever the layout.
nn::ForwardContext training_context(const Run& run, std::int64_t step, std::int64_t m);

// Runs step run.state.step + 1 and advances run.state (step, consumed samples, lr, loss scale). With
// `stop_before` (asked before each micro-batch m >= 1, the same answer on every rank), a true answer
// abandons the step: nullopt, and the parameters, optimizer and run.state are those before it.
// A loss that is not finite outside fp16 is an error naming the step.
std::optional<StepResult> train_step(Run& run, const ModelRunner::StopBefore& stop_before = {});

// Every rank, at a logged step of a job of several ranks: gathers each rank's own work of the step
// (`work_seconds`) over the world and returns the slowest against the median (on every rank).
StepMetrics::Straggler straggler_report(Run& run, double work_seconds);

// The metrics line of a finished step: `seconds` it took, `elapsed` since the first step of this call,
// which was `first_step` + 1.
StepMetrics step_metrics(const Run& run, const StepResult& result, double seconds, double elapsed,
                         std::int64_t first_step);

}  // namespace trident::train::detail
