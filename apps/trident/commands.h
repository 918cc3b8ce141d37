// The trident command's subcommands. Each lives in its own file and adds
// itself to the CLI11 app; main.cpp only wires them up and handles errors.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "trident/checkpoint/sharded.h"
#include "trident/data/tokenizer/tokenizer.h"
#include "trident/models/transformer_lm.h"

namespace trident::cli {

// Each add_* registers a subcommand whose callback does the work; a subcommand
// throws trident::Error on bad input and main() turns that into one clear line.
void add_info_command(CLI::App& app);
// trident tokenizer {encode,decode,train} (tokenizer_command.cpp)
void add_tokenizer_command(CLI::App& app);
// trident preprocess (preprocess_command.cpp)
void add_preprocess_command(CLI::App& app);

// trident train (train_command.cpp)
void add_train_command(CLI::App& app);
// trident generate (generate_command.cpp)
void add_generate_command(CLI::App& app);

// trident eval (eval_command.cpp)
void add_eval_command(CLI::App& app);

// trident export (export_command.cpp)
void add_export_command(CLI::App& app);

// trident launch (launch_command.cpp)
void add_launch_command(CLI::App& app);

// trident plot (plot_command.cpp)
void add_plot_command(CLI::App& app);
// trident plan (plan_command.cpp)
void add_plan_command(CLI::App& app);

// The contents of the file that option `flag` names (e.g. "--text"); errors name the flag and say
// what is wrong (missing, a directory, unreadable) instead of a stream's error. (main.cpp)
std::string read_file_option(std::string_view flag, const std::string& path);

// Checks before any work that option `flag` names a place this command can write: a file (or, with
// `directory`, a directory) that is not the other kind, in a directory that exists or is created here
// and is writable. Errors name the flag and the directory at fault, not a temporary file. (main.cpp)
void prepare_output_option(std::string_view flag, const std::string& path, bool directory);

// Megatron-LM's flag among argv (before a `--`) that CLI11 refused in `refused` (its "not expected"
// message), as one line naming the trident key and the --set that does the same; "" for none.
// (peer_flags.cpp)
std::string peer_flag_hint(int argc, char** argv, std::string_view refused);

// -v/--verbose, of the trident command or of a subcommand: error details, and the whole resolved
// configuration at the start of training. (main.cpp)
bool& verbose();

// The status main exits with when the subcommand ran without an error (0 unless set: trident launch
// sets mpirun's). (main.cpp)
int& exit_status();

// --precision fp32|bf16|fp16 of generate and eval: the dtype matmuls and activations run in (the
// weights stay f32; each gets one cached copy in that dtype). (inference_model.cpp)
void add_precision_option(CLI::App& command, std::string& precision);
DType precision_dtype(const std::string& precision);

}  // namespace trident::cli
