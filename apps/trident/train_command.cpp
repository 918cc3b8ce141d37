// trident train [CONFIG] [--deepspeed ds_config.json] [--set section.key=value]... [--run-dir DIR] [--resume] [-v]
#include <fmt/format.h>

#include "commands.h"
#include "trident/core/error.h"
#include "trident/train/config/config.h"
#include "trident/train/trainer.h"

namespace trident::cli {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model as a TOML config describes");
  auto options = std::make_shared<train::TrainOptions>();
  auto help_config = std::make_shared<bool>(false);
  cmd->add_option("config", options->config_path,
                  "TOML config file (see configs/); with --resume, default: the run directory's config.toml");
  cmd->add_option("--set", options->overrides, "Override a config key: section.key=value (repeatable)");
  auto deepspeed = std::make_shared<std::string>();
  cmd->add_option("--deepspeed", *deepspeed,
                  "A DeepSpeed JSON config (ds_config.json) mapped onto the config's keys, as train.deepspeed_config; "
                  "applied after the TOML file and before --set (docs/deepspeed.md)");
  cmd->add_option("--run-dir", options->run_dir, "Directory for metrics, the resolved config and checkpoints")
      ->capture_default_str();
  cmd->add_flag("--resume", options->resume, "Continue from the run's latest checkpoint");
  cmd->add_flag("--help-config", *help_config, "List every config key with its type");
  cmd->add_flag("-v,--verbose", verbose(), "Print the whole resolved config at the start (and error details)");
  cmd->callback([options, help_config, deepspeed] {
    if (!deepspeed->empty()) {
      // The same as setting the key: it names the file however its path is spelled (a TOML string).
      std::string quoted;
      for (char ch : *deepspeed) quoted += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
      options->overrides.insert(options->overrides.begin(), "train.deepspeed_config=\"" + quoted + "\"");
    }
    if (*help_config) {
      for (const auto& k : train::config_keys()) fmt::print("{:<36} {}\n", k.key, k.type);
      return;
    }
    options->verbose = verbose();
    const train::TrainSummary s = train::train(*options);
    // Once per job (every rank stopped at the same step with the same checkpoint). A signal before the
    // first step (the set-up, the evaluation at step 0) saved nothing, and the trainer's line said so.
    const bool before_any_step = s.stopped == train::StopCause::signal && s.last_checkpoint.empty();
    if (s.interrupted && !before_any_step && error_rank() <= 0) {
      fmt::print(
          "trident: interrupted at step {}; {}{}\n", s.steps_done,
          s.last_checkpoint.empty() ? std::string("no checkpoint written by this run")
                                    : "checkpoint " + s.last_checkpoint,
          s.stopped == train::StopCause::signal
              ? fmt::format(" (exit status {}: the run did not finish; resume with --resume)", train::kExitInterrupted)
              : "");
    }
    // A signal (Slurm's preemption, scancel, the time limit's --signal) leaves the run unfinished: a job
    // chain must not take it for done. train.exit_duration_minutes is a deliberate stop: 0.
    if (s.stopped == train::StopCause::signal) exit_status() = train::kExitInterrupted;
  });
}

}  // namespace trident::cli
