// trident plot RUN_DIR... [--output loss.png|loss.svg] [--log-y] [--title TEXT]
//
// Draws the training and validation loss (and, below, the learning rate) of one or more runs from
// their metrics.jsonl into a PNG or SVG, without TensorBoard. Several runs overlay, one colour each,
// named in the legend. Values that are not finite are left out, and a warning says which.
#include <fmt/format.h>

#include <filesystem>

#include "commands.h"
#include "trident/core/error.h"
#include "trident/plot/figure.h"
#include "trident/train/config/config.h"
#include "trident/train/log/metrics_log.h"

namespace trident::cli {

namespace fs = std::filesystem;

namespace {

struct PlotOptions {
  std::vector<std::string> runs;
  std::string output;
  std::string title;
  bool log_y = false;
};

// A run directory's metrics file (log.metrics_file of the config.toml the run wrote there, else
// metrics.jsonl), or the metrics file itself when `run` names one.
std::string metrics_path(const std::string& run) {
  std::error_code ec;
  TRIDENT_CHECK(fs::exists(run, ec), "'{}': no such run directory or metrics file", run);
  if (!fs::is_directory(run, ec)) return run;
  train::Config config;
  const fs::path resolved = fs::path(run) / "config.toml";
  if (fs::exists(resolved, ec)) {
    try {
      train::apply_file(config, resolved.string());
    } catch (const Error& e) {
      TRIDENT_FAIL("'{}': cannot tell the run's metrics file: {}", run, e.message());
    }
  }
  return (fs::path(run) / config.log.metrics_file).string();  // an absolute log.metrics_file stays as it is
}

// The run's name in the legend and title: its directory as given, without a trailing '/'.
std::string run_name(const std::string& run) {
  fs::path p(run);
  if (!fs::is_directory(p)) p = p.parent_path();
  std::string name = p.lexically_normal().string();
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  return name.empty() ? "." : name;
}

plot::Series series(std::string label, const train::MetricsCurve& c, plot::Color color, bool dashed, bool markers) {
  plot::Series s{std::move(label), {}, {}, color, dashed, markers};
  for (std::size_t i = 0; i < c.steps.size(); ++i) {
    s.x.push_back(static_cast<double>(c.steps[i]));
    s.y.push_back(c.values[i]);
  }
  return s;
}

// On a log axis a loss must be positive: the others are left out and named in `dropped`.
void keep_positive(plot::Series& s, const std::string& key, std::vector<std::string>& dropped) {
  plot::Series kept = s;
  kept.x.clear();
  kept.y.clear();
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    if (s.y[i] > 0) {
      kept.x.push_back(s.x[i]);
      kept.y.push_back(s.y[i]);
    } else {
      dropped.push_back(fmt::format("{} at step {} (<= 0 on the log axis)", key, s.x[i]));
    }
  }
  s = std::move(kept);
}

// "24 training losses (steps 50-1200, last 3.565)".
std::string describe(const train::MetricsCurve& c, const char* what) {
  if (c.empty()) return fmt::format("no {}es", what);
  if (c.steps.size() == 1) return fmt::format("1 {} (step {}: {:.4g})", what, c.steps[0], c.values[0]);
  return fmt::format("{} {}es (steps {}-{}, last {:.4g})", c.steps.size(), what, c.steps.front(), c.steps.back(),
                     c.values.back());
}

// The first few values left out, for a warning or an error.
std::string dropped_list(const std::vector<std::string>& dropped) {
  const std::size_t shown = std::min<std::size_t>(dropped.size(), 5);
  return fmt::format("{}{}", fmt::join(dropped.begin(), dropped.begin() + static_cast<long>(shown), ", "),
                     dropped.size() > shown ? ", ..." : "");
}

void plot_runs(const PlotOptions& o) {
  const std::string output = o.output.empty() ? (fs::path(run_name(o.runs[0])) / "loss.png").string() : o.output;
  plot::figure_format(output);  // a bad extension is an error before any work
  prepare_output_option("--output", output, false);
  std::vector<train::MetricsLog> logs;
  for (const std::string& run : o.runs) logs.push_back(train::read_metrics_log(metrics_path(run)));

  const bool several = logs.size() > 1;
  plot::Panel loss{"loss", o.log_y, {}, true, 2.2};
  plot::Panel lr{"learning rate", false, {}, false, 1};
  std::vector<std::string> names;
  for (std::size_t i = 0; i < logs.size(); ++i) {
    train::MetricsLog& log = logs[i];
    const std::string name = run_name(o.runs[i]);
    names.push_back(name);
    const int c = static_cast<int>(i);
    plot::Series train =
        series(several ? name + " training" : "training loss", log.loss, plot::palette(c), false, false);
    plot::Series val = series(several ? name + " validation" : "validation loss", log.val_loss,
                              plot::palette(several ? c : 1), several, true);
    if (o.log_y) {
      keep_positive(train, "loss", log.dropped);
      keep_positive(val, "val_loss", log.dropped);
    }
    TRIDENT_CHECK(!train.x.empty() || !val.x.empty(), "'{}': no loss to draw: every value was left out ({})", log.path,
                  dropped_list(log.dropped));
    if (!train.x.empty()) loss.series.push_back(std::move(train));
    if (!val.x.empty()) loss.series.push_back(std::move(val));
    if (!log.lr.empty()) lr.series.push_back(series(name, log.lr, plot::palette(c), false, false));
  }
  for (const train::MetricsLog& log : logs) {
    fmt::print("plot: {}: {}, {}\n", log.path, describe(log.loss, "training loss"),
               describe(log.val_loss, "validation loss"));
    if (!log.dropped.empty()) {
      fmt::print(stderr, "warning: {}: left out {} value(s) that cannot be drawn: {}\n", log.path, log.dropped.size(),
                 dropped_list(log.dropped));
    }
    if (log.unfinished_last_line) {
      fmt::print(stderr, "warning: {}: skipped its unfinished last line (the run is writing it)\n", log.path);
    }
  }

  plot::Figure figure;
  const bool with_lr = !lr.series.empty();
  const std::string runs =
      names.size() <= 3 ? fmt::format("{}", fmt::join(names, ", ")) : fmt::format("{} runs", names.size());
  figure.title = !o.title.empty() ? o.title : fmt::format("{}: {}", runs, with_lr ? "loss and learning rate" : "loss");
  figure.panels.push_back(std::move(loss));
  if (with_lr) figure.panels.push_back(std::move(lr));
  plot::write_figure(figure, output);
  fmt::print("plot: {}\n", output);
}

}  // namespace

void add_plot_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "Draw runs' training/validation loss and learning rate into a PNG or SVG");
  auto o = std::make_shared<PlotOptions>();
  cmd->add_option("runs", o->runs, "Run directories (or their metrics.jsonl files); several overlay")->required();
  cmd->add_option("-o,--output", o->output, "The picture to write, .png or .svg (default: FIRST_RUN_DIR/loss.png)");
  cmd->add_flag("--log-y", o->log_y, "A logarithmic loss axis");
  cmd->add_option("--title", o->title, "The figure's title (default: the runs' names)");
  cmd->callback([o] { plot_runs(*o); });
}

}  // namespace trident::cli
