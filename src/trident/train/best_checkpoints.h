// Internal to the train module: the best checkpoints and early stopping, as Lightning's
// ModelCheckpoint(monitor=..., save_top_k=k) and EarlyStopping(patience=p, min_delta=d).
//
// Each evaluation after a step (not the one before the first step, which is a baseline as Lightning's
// sanity check is) is observed once:
//   - early stopping keeps the best value that improved on the previous best by more than min_delta, its
//     step, and the evaluations in a row since then without such an improvement; p of them stop the run;
//   - with checkpoint.keep_best = k the evaluated step is also saved, and the k checkpoints of the lowest
//     value are kept beside the newest checkpoint.keep (a tie keeps the earlier one, as Lightning does).
// The state lives in each checkpoint's meta.json ("monitor"), so a resume under any layout continues it;
// the validation loss is the same number on every rank, so every rank takes the same decisions.
// Values are recorded as val loss; checkpoint.monitor = "val_ppl" compares exp(val loss), which orders
// the checkpoints the same but gives min_delta the perplexity's scale.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trident/train/config/config.h"

namespace trident::train::detail {

struct MonitorState {
  std::optional<double> best;                      // early stopping's best val loss (none before an evaluation)
  std::int64_t best_step = 0;                      // its step
  std::int64_t evaluations_without_improvement = 0;
  std::vector<std::pair<double, std::int64_t>> kept;  // (val loss, step) of the best checkpoints, best first

  bool operator==(const MonitorState&) const = default;
};

// The monitored metric's value for a validation loss: the loss, or the perplexity.
double monitored_value(const Config& config, double val_loss);

// Observes the evaluation of `step` (the step is then saved when checkpoint.keep_best > 0).
void observe(MonitorState& state, const Config& config, std::int64_t step, double val_loss);

// Whether train.early_stopping_patience evaluations in a row did not improve (false when it is 0).
bool patience_exhausted(const MonitorState& state, const Config& config);

// "stopped after step N: val loss has not improved by more than D for P evaluations (best X at step M)".
std::string early_stop_message(const MonitorState& state, const Config& config, std::int64_t step);

// The names of the kept best checkpoints (step_NNNNNNNN), best first.
std::vector<std::string> kept_best_names(const MonitorState& state);

// meta.json's "monitor" object, and back (`where` names the file in errors; a checkpoint without the
// object, written before it existed, gives the empty state).
nlohmann::json monitor_json(const MonitorState& state, const Config& config);
MonitorState monitor_from_meta(const nlohmann::json& meta, const std::string& where);

}  // namespace trident::train::detail
