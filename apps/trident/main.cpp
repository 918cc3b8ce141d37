// trident: the command-line entry point. The only place that catches errors,
// prints one clear line (more with --verbose) and exits non-zero.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "trident/core/error.h"
#include "trident/core/version.h"
#include "trident/dist/mpi_communicator.h"

namespace {
// One clear line, then end the job: in a multi-rank run every other rank is
// brought down too (MPI_Abort), so nobody hangs in a collective.
[[noreturn]] void fail(const std::string& line) {
  std::fprintf(stderr, "trident: error: %s\n", line.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  trident::dist::abort_job(1);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trident: train large language models with 3D parallelism", "trident"};
  app.set_version_flag("--version", std::string("trident ") + trident::kVersion);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Print error details (source location)");
  app.require_subcommand(1);

  trident::cli::add_info_command(app);
  trident::cli::add_tokenizer_command(app);
  trident::cli::add_preprocess_command(app);
  trident::cli::add_train_command(app);
  trident::cli::add_generate_command(app);
  trident::cli::add_eval_command(app);
  trident::cli::add_export_command(app);
  trident::cli::add_launch_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    // A usage error is one line too (CLI11's own print adds a second), naming the help to read.
    std::string command = "trident";
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      command += " " + sub->get_name();
    }
    std::fprintf(stderr, "trident: error: %s (see %s --help)\n", e.what(), command.c_str());
    return e.get_exit_code();
  } catch (const trident::Error& e) {
    // In a multi-rank job the rank is part of the line.
    const std::string where = e.rank() >= 0 ? fmt::format("rank {}: ", e.rank()) : std::string();
    fail(verbose ? std::string(e.what()) : where + e.message());
  } catch (const std::exception& e) {
    fail(e.what());
  }
  trident::dist::finalize();
  return 0;
}
