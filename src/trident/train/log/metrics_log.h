// Reading a run's metrics.jsonl (written by MetricsLogger, metrics.h) back into curves: the training
// loss and learning rate of each logged step, the validation loss of each evaluation.
//
// Each key keeps one value per step, the last one written: a resume normally truncates the steps it
// redoes (MetricsLogger::truncate_after), but a file written by other means may repeat them. A value
// that is not finite (JSON null, as NaN and inf are written, or a bare NaN/Infinity) is left out of its
// curve and listed in `dropped`. Errors name the file and, for a bad line, its number.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trident::train {

struct MetricsCurve {
  std::vector<std::int64_t> steps;  // increasing
  std::vector<double> values;       // finite
  bool empty() const noexcept { return steps.empty(); }
};

struct MetricsLog {
  std::string path;
  MetricsCurve loss, lr, val_loss;
  // Non-finite values left out: "loss at step 120".
  std::vector<std::string> dropped;
  // A last line without its newline that does not parse (a run writing it right now) is skipped: true.
  bool unfinished_last_line = false;
};

// Reads `path`; an error when it is missing, holds no loss and no val_loss value, or has a line that is
// not a JSON object with an integer "step" >= 0 and numeric (or null) "loss", "lr", "val_loss".
MetricsLog read_metrics_log(const std::string& path);

}  // namespace trident::train
