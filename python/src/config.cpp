// The configuration (trident.Config) and training (trident.Trainer) from Python: the `trident train`
// command's own functions, with a TrainObserver that calls the Python callbacks.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "trident/core/error.h"
#include "trident/train/config/config.h"
#include "trident/train/trainer.h"

namespace trident::python {

namespace {

// The configuration `path` (TOML; "" for the defaults) and `overrides` ("section.key=value", as --set)
// describe: each key and value checked as `trident train` checks them; with `whole`, the cross-field rules
// too (data, batch sizes and layout for this job's rank count), which training applies.
train::Config resolve(const std::string& path, const std::vector<std::string>& overrides, bool whole) {
  const int world_size = job_world()->size();
  std::vector<std::string> notes;
  train::Config config = train::load_config(path, overrides, world_size, &notes);
  if (whole) train::validate_config(config, world_size);
  return config;
}

Dict metrics_dict(const train::StepMetrics& m) {
  Dict d;
  d["step"] = m.step;
  d["steps"] = m.steps;
  d["loss"] = m.loss;
  d["lr"] = m.lr;
  d["grad_norm"] = m.grad_norm;
  d["tokens_per_s"] = m.tokens_per_s;
  d["mfu"] = m.mfu;
  d["step_ms"] = m.step_ms;
  d["peak_memory_mb"] = m.peak_memory_mb;
  d["skipped"] = m.skipped;
  if (m.loss_scale > 0) d["loss_scale"] = m.loss_scale;
  if (m.epochs > 0) d["epoch"] = m.epoch;
  if (m.moe) {
    d["moe_aux_loss"] = m.moe->aux_loss;
    d["moe_dropped_fraction"] = m.moe->dropped_fraction;
  }
  return d;
}

Dict info_dict(const train::RunInfo& i) {
  Dict d;
  d["rank"] = i.rank;
  d["world_size"] = i.world_size;
  d["dp_rank"] = i.dp_rank;
  d["dp"] = i.dp_size;
  d["tp_rank"] = i.tp_rank;
  d["tp"] = i.tp_size;
  d["pp_rank"] = i.pp_rank;
  d["pp"] = i.pp_size;
  d["cp_rank"] = i.cp_rank;
  d["cp"] = i.cp_size;
  d["ep_rank"] = i.ep_rank;
  d["ep"] = i.ep_size;
  d["first_step"] = i.first_step;
  d["steps"] = i.steps;
  d["global_batch"] = i.global_batch;
  d["seq_len"] = i.seq_len;
  d["parameters"] = i.parameters;
  d["run_dir"] = i.run_dir;
  d["checkpoint_dir"] = i.checkpoint_dir;
  return d;
}

const char* stop_cause_name(train::StopCause c) {
  switch (c) {
    case train::StopCause::completed: return "completed";
    case train::StopCause::signal: return "signal";
    case train::StopCause::time_limit: return "time_limit";
    case train::StopCause::early_stopping: return "early_stopping";
    case train::StopCause::requested: return "requested";
  }
  return "completed";
}

Dict summary_dict(const train::TrainSummary& s) {
  Dict d;
  d["steps_done"] = s.steps_done;
  d["losses"] = s.losses;
  nb::list val;
  for (const auto& [step, loss] : s.val_losses) val.append(nb::make_tuple(step, loss));
  d["val_losses"] = val;
  d["last_checkpoint"] = s.last_checkpoint;
  d["interrupted"] = s.interrupted;
  d["stopped"] = stop_cause_name(s.stopped);
  return d;
}

// Calls `dispatch(hook, argument)` of the Python Trainer for each hook, with the GIL; `dispatch` returns
// whether a callback asked to stop (trainer.should_stop). A callback's exception propagates through the
// training loop (which unwinds as for any error) and reaches Python as itself.
class PythonObserver final : public train::TrainObserver {
 public:
  explicit PythonObserver(nb::object dispatch) : dispatch_(std::move(dispatch)) {}

  void on_train_start(const train::RunInfo& info) override { call("on_train_start", [&] { return info_dict(info); }); }
  void on_train_batch_end(const train::StepMetrics& m) override {
    call("on_train_batch_end", [&] { return metrics_dict(m); });
  }
  void on_validation_end(std::int64_t step, double loss, std::optional<double> accuracy) override {
    call("on_validation_end", [&] {
      Dict d;
      d["step"] = step;
      d["val_loss"] = loss;
      if (accuracy) d["val_mlm_accuracy"] = *accuracy;
      return d;
    });
  }
  void on_save_checkpoint(std::int64_t step, const std::string& dir) override {
    call("on_save_checkpoint", [&] {
      Dict d;
      d["step"] = step;
      d["path"] = dir;
      return d;
    });
  }
  void on_train_end(const train::TrainSummary& s) override { call("on_train_end", [&] { return summary_dict(s); }); }
  bool wants_stop() override { return stop_; }

 private:
  template <class MakeArgument>
  void call(const char* hook, MakeArgument&& make) {
    nb::gil_scoped_acquire locked;
    stop_ = nb::cast<bool>(dispatch_(hook, make())) || stop_;
  }

  nb::object dispatch_;
  bool stop_ = false;
};

}  // namespace

void bind_config(nb::module_& m) {
  m.def(
      "resolve_config",
      [](const std::string& path, const std::vector<std::string>& overrides, bool whole) {
        return train::to_toml(resolve(path, overrides, whole));
      },
      nb::arg("path"), nb::arg("overrides"), nb::arg("whole") = false,
      "The configuration as TOML (every key), after the checks `trident train` makes of each key (whole: and "
      "of the keys together); raises ConfigError");
  m.def(
      "config_keys",
      [] {
        Dict keys;
        for (const train::ConfigKey& k : train::config_keys()) keys[k.key.c_str()] = k.type;
        return keys;
      },
      "Every config key and its type, as `trident train --help-config` lists them");
  m.def(
      "unknown_key",
      [](const std::string& key) {
        const std::string near = train::nearest_key(key);
        if (!near.empty()) TRIDENT_FAIL("unknown key '{}' (did you mean '{}'?)", key, near);
        TRIDENT_FAIL("unknown key '{}' (see `trident train --help-config` for the known keys)", key);
      },
      nb::arg("key"), "Raises the ConfigError `trident train` gives for an unknown key");
  m.def(
      "train",
      [](const std::string& path, const std::vector<std::string>& overrides, const std::string& run_dir, bool resume,
         bool quiet, bool verbose, nb::object dispatch) {
        PythonObserver observer(std::move(dispatch));
        train::TrainOptions options{.config_path = path,
                                    .overrides = overrides,
                                    .run_dir = run_dir,
                                    .resume = resume,
                                    .quiet = quiet,
                                    .verbose = verbose,
                                    .world = job_world(),
                                    .observer = &observer};
        train::TrainSummary summary;
        {
          // SIGINT and SIGTERM stop at the next step boundary with a checkpoint while this runs (the
          // trainer's handlers replace Python's and are put back after).
          nb::gil_scoped_release unlocked;
          summary = train::train(options);
        }
        return summary_dict(summary);
      },
      nb::arg("path"), nb::arg("overrides"), nb::arg("run_dir"), nb::arg("resume"), nb::arg("quiet"),
      nb::arg("verbose"), nb::arg("dispatch"),
      "Runs `trident train`'s loop; `dispatch(hook, argument) -> bool` is called for every hook, with the GIL");
}

}  // namespace trident::python
