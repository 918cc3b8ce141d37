// Metrics of a training run: the progress display on rank 0 and the JSONL log.
//
// On a terminal the progress is one live line (step, loss, tokens/s, ETA)
// rewritten in place, with a permanent line per logged step; elsewhere (CI,
// files) only the permanent lines are printed. Every logged step is also one
// JSON object in RUN_DIR/metrics.jsonl, and, with log.tensorboard, its numbers are one TensorBoard event
// (tensorboard.h), written at the same moment so that the two always agree.
#pragma once

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trident::train {

// Seconds as the log shows them: 42s, 3m05s, 1h02m; "--" when not finite or negative.
std::string format_duration(double seconds);

class TensorBoardWriter;

struct StepMetrics {
  std::int64_t step = 0;
  std::int64_t steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double mfu = 0;             // fraction of the peak
  double step_ms = 0;
  double peak_memory_mb = 0;
  double eta_s = 0;
  double loss_scale = 0;      // fp16 only (0 otherwise)
  bool skipped = false;       // fp16 overflow
  // With train.epochs: the epochs trained after this step (global samples over one epoch's, fractional as
  // Hugging Face's Trainer logs it) and train.epochs; epochs 0: not shown.
  double epoch = 0;
  double epochs = 0;
  // Mixture of experts (absent for a dense model): the auxiliary losses' part of `loss`, each MoE
  // layer's token-load imbalance (the busiest expert's routed assignments over the mean), and the
  // fraction of assignments the capacity dropped; over the global batch.
  struct MoE {
    double aux_loss = 0;
    std::vector<double> load_imbalance;
    double dropped_fraction = 0;
  };
  std::optional<MoE> moe;
  // Several ranks, a logged step: the rank whose own work (its step time less its time blocked on
  // communication) was longest, its host, and that work against the median over the ranks; `flagged`
  // when the ratio passes log.straggler_threshold (then the progress line names it).
  struct Straggler {
    int rank = 0;
    std::string host;
    double work_ms = 0;
    double median_ms = 0;
    double ratio = 1;
    bool flagged = false;
  };
  std::optional<Straggler> straggler;
};

class MetricsLogger {
 public:
  // progress: "auto" (live line when stdout is a terminal — under MPI, when
  // `trident launch`'s is: TRIDENT_STDOUT_IS_TTY=1), "on", "off".
  // tensorboard_dir: where the TensorBoard event files go ("" = none); tensorboard_tag: the run's tag
  // in their names (TensorBoardWriter).
  MetricsLogger(const std::string& metrics_path, const std::string& progress, bool enabled,
                const std::string& tensorboard_dir = "", const std::string& tensorboard_tag = "");
  ~MetricsLogger();

  void log_step(const StepMetrics& m, bool permanent);
  // The validation loss (and perplexity), and a masked-LM model's accuracy at the masked positions.
  void log_eval(std::int64_t step, double val_loss, std::optional<double> mlm_accuracy = std::nullopt);
  void message(const std::string& text);  // a permanent line (clears the live line first)
  void finish();
  // Drops the JSONL lines of steps after `step` (a resume redoes them), crash-safely: the kept lines go to
  // a new file that replaces the old one. A line that does not parse is kept. The TensorBoard files drop
  // those steps too (TensorBoardWriter::resume_at).
  void truncate_after(std::int64_t step);
  bool live() const noexcept { return live_; }  // the live progress line is shown

 private:
  void write_json(const nlohmann::json& j);
  bool enabled_;
  bool live_;
  bool live_shown_ = false;
  std::string path_;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  bool tensorboard_started_ = false;  // the START event is written
};

}  // namespace trident::train
