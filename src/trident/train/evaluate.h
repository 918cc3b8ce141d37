// Internal to the train module: the validation loss of a Run.
//
// An evaluation reads train.eval_steps global batches of the validation stream
// from its start (the same samples under every layout and at every call) and
// returns their token-mean loss, the same on every rank, and for a masked-LM
// model the accuracy of its predictions at the masked positions. It runs one
// global batch at a time, so that a signal stops a long evaluation within a batch.
#pragma once

#include <functional>
#include <optional>

#include "trident/train/run.h"

namespace trident::train::detail {

class Evaluator {
 public:
  // Over `run`'s model and validation data (run.data.valid, which must exist).
  explicit Evaluator(Run& run);

  // The loss, or nullopt when `stop` (asked between global batches, on every rank) says to stop.
  std::optional<double> evaluate(const std::function<bool()>& stop = {});
  // A masked-LM model's accuracy at the last evaluation's masked positions (the argmax over the whole
  // vocabulary is the label), the same on every rank; nullopt for a causal model.
  std::optional<double> mlm_accuracy() const noexcept { return mlm_accuracy_; }
  // The batches one evaluation runs on each data-parallel rank.
  std::int64_t micro_batches() const noexcept { return eval_steps_ * run_.accum; }

 private:
  Run& run_;
  std::int64_t eval_steps_;  // global batches: train.eval_steps, at least 1
  double labels_ = 0;        // the labels one evaluation trains on (the same samples every time), counted once
  std::optional<double> mlm_accuracy_;
};

// The forward context of an evaluation (no dropout).
nn::ForwardContext evaluation_context(const Run& run);

}  // namespace trident::train::detail
