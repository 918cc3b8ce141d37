#include "trident/train/log/metrics.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "trident/core/atomic_file.h"
#include "trident/core/error.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/train/log/tensorboard.h"

namespace trident::train {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--";
  const auto t = static_cast<long>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

namespace {

// The numbers of a metrics.jsonl line as TensorBoard scalars, under the JSON keys; a list's items are
// KEY/0, KEY/1, ... (one per MoE layer). The step is the event's; strings and flags are not scalars.
std::vector<std::pair<std::string, double>> scalars_of(const nlohmann::json& j) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [key, value] : j.items()) {
    if (key == "step") continue;
    if (value.is_number()) out.emplace_back(key, value.get<double>());
    if (value.is_array())
      for (std::size_t i = 0; i < value.size(); ++i)
        if (value[i].is_number()) out.emplace_back(fmt::format("{}/{}", key, i), value[i].get<double>());
  }
  return out;
}
}  // namespace

MetricsLogger::~MetricsLogger() = default;

MetricsLogger::MetricsLogger(const std::string& metrics_path, const std::string& progress, bool enabled,
                             const std::string& tensorboard_dir, const std::string& tensorboard_tag)
    : enabled_(enabled) {
  TRIDENT_CHECK(progress == "auto" || progress == "on" || progress == "off",
                "log.progress must be auto, on or off, got '{}'", progress);
  // Open MPI gives its ranks a pseudo-terminal even when mpirun's own output goes to a file, so
  // under MPI isatty() says nothing: `trident launch` passes on whether its stdout is a terminal,
  // and a rank started some other way prints plain lines (safe in a log, fine on a screen).
  const char* launched_tty = std::getenv("TRIDENT_STDOUT_IS_TTY");
  const bool tty = launched_tty            ? std::string_view(launched_tty) == "1"
                   : dist::launched_by_mpi() ? false
                                             : isatty(STDOUT_FILENO) != 0;
  live_ = enabled && (progress == "on" || (progress == "auto" && tty));
  if (enabled_ && !metrics_path.empty()) {
    path_ = metrics_path;
    jsonl_.open(metrics_path, std::ios::app);
    TRIDENT_CHECK(jsonl_.good(), "cannot open metrics file '{}'", metrics_path);
  }
  if (enabled_ && !tensorboard_dir.empty()) {
    try {
      tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir, tensorboard_tag);
    } catch (const Error& e) {
      TRIDENT_FAIL("log.tensorboard: {}", e.message());
    }
  }
}

void MetricsLogger::write_json(const nlohmann::json& j) {
  if (tensorboard_) {
    // A fresh run starts at step 0: TensorBoard then shows none of an earlier run's steps from older files
    // in the directory (which stay on disk).
    if (!tensorboard_started_) tensorboard_->start_at(0);
    tensorboard_started_ = true;
    tensorboard_->scalars(j.at("step").get<std::int64_t>(), scalars_of(j));
  }
  if (!jsonl_.is_open()) return;
  jsonl_ << j.dump() << '\n';
  jsonl_.flush();
}

void MetricsLogger::log_step(const StepMetrics& m, bool permanent) {
  if (!enabled_) return;
  const std::string line = fmt::format(
      "step {:>6}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | MFU {:.1f}% | {:.0f} ms/step | "
      "mem {:.0f} MB{}{}{}{}{} | ETA {}",
      m.step, m.steps, m.loss, m.lr, m.grad_norm, m.tokens_per_s, 100 * m.mfu, m.step_ms, m.peak_memory_mb,
      m.moe ? fmt::format(" | aux {:.4f} | load max/mean {:.2f}{}", m.moe->aux_loss,
                          m.moe->load_imbalance.empty() ? 0.0
                                                        : *std::max_element(m.moe->load_imbalance.begin(),
                                                                            m.moe->load_imbalance.end()),
                          m.moe->dropped_fraction > 0 ? fmt::format(" | dropped {:.1f}%", 100 * m.moe->dropped_fraction)
                                                      : "")
            : "",
      m.loss_scale > 0 ? fmt::format(" | scale {:.0f}", m.loss_scale) : "", m.skipped ? " | skipped (overflow)" : "",
      m.straggler && m.straggler->flagged
          ? fmt::format(" | straggler rank {} on {}: {:.0f} ms, {:.1f}x the median", m.straggler->rank,
                        m.straggler->host, m.straggler->work_ms, m.straggler->ratio)
          : "",
      m.epochs > 0 ? fmt::format(" | epoch {:.2f}/{}", m.epoch, m.epochs) : "", format_duration(m.eta_s));
  if (permanent) {
    if (live_shown_) std::fputs("\r\033[K", stdout);
    std::fputs((line + "\n").c_str(), stdout);
    live_shown_ = false;
    nlohmann::json j = {{"step", m.step},         {"loss", m.loss},       {"lr", m.lr},
                        {"grad_norm", m.grad_norm}, {"tokens_per_s", m.tokens_per_s}, {"mfu", m.mfu},
                        {"step_ms", m.step_ms},   {"peak_memory_mb", m.peak_memory_mb}};
    if (m.epochs > 0) j["epoch"] = m.epoch;
    if (m.loss_scale > 0) j["loss_scale"] = m.loss_scale;
    if (m.moe) {
      j["aux_loss"] = m.moe->aux_loss;
      j["moe_load_imbalance"] = m.moe->load_imbalance;
      j["moe_dropped_fraction"] = m.moe->dropped_fraction;
    }
    if (m.skipped) j["skipped"] = true;
    if (m.straggler) {
      j["straggler_rank"] = m.straggler->rank;
      j["straggler_host"] = m.straggler->host;
      j["straggler_work_ms"] = m.straggler->work_ms;
      j["median_work_ms"] = m.straggler->median_ms;
      j["straggler_ratio"] = m.straggler->ratio;
    }
    write_json(j);
  } else if (live_) {
    std::fputs(("\r\033[K" + line).c_str(), stdout);
    live_shown_ = true;
  }
  std::fflush(stdout);
}

void MetricsLogger::log_eval(std::int64_t step, double val_loss, std::optional<double> mlm_accuracy) {
  if (!enabled_) return;
  message(fmt::format("eval at step {}: val loss {:.4f} | val perplexity {:.2f}{}", step, val_loss, std::exp(val_loss),
                      mlm_accuracy ? fmt::format(" | val MLM accuracy {:.2f}%", 100 * *mlm_accuracy) : ""));
  nlohmann::json record = {{"step", step}, {"val_loss", val_loss}, {"val_ppl", std::exp(val_loss)}};
  if (mlm_accuracy) record["val_mlm_accuracy"] = *mlm_accuracy;
  write_json(record);
}

void MetricsLogger::message(const std::string& text) {
  if (!enabled_) return;
  if (live_shown_) std::fputs("\r\033[K", stdout);
  live_shown_ = false;
  std::fputs((text + "\n").c_str(), stdout);
  std::fflush(stdout);
}

void MetricsLogger::truncate_after(std::int64_t step) {
  if (tensorboard_) {
    tensorboard_->resume_at(step + 1);
    tensorboard_started_ = true;
  }
  if (!jsonl_.is_open()) return;
  jsonl_.close();
  std::ifstream in(path_);
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<std::int64_t>() > step) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  in.close();
  if (dropped) write_file_atomically(path_, kept);
  jsonl_.open(path_, std::ios::app);
  TRIDENT_CHECK(jsonl_.good(), "cannot open metrics file '{}'", path_);
}

void MetricsLogger::finish() {
  if (enabled_ && live_shown_) std::fputs("\n", stdout);
  live_shown_ = false;
  std::fflush(stdout);
}

}  // namespace trident::train
