// trident: the command-line entry point. The only place that catches errors,
// prints one clear line (more with --verbose) and exits non-zero.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <unistd.h>

#include "commands.h"
#include "trident/core/error.h"
#include "trident/core/interrupt.h"
#include "trident/core/version.h"
#include "trident/dist/communicator.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/train/trainer.h"

namespace {
// One clear line per error, once per job, then the end of the job. Ranks that all fail agree first:
// when every rank failed with the same message (a config error that each one detects alike), rank 0
// alone prints it, and all of them finalize MPI and exit with `exit_code`, so the launcher has no
// abort to report. An error that only some ranks see is printed by each of those, naming its rank,
// and brings every other rank down (MPI_Abort), so nobody hangs in a collective.
// `detail` (--verbose) is printed instead of `line`; it names the rank and host itself. `alone`: a rank
// whose collective timed out reports at once, naming its rank, and ends the job — its peers are stuck
// or gone, so there is no agreement to wait for.
// `kind`: what the line is ("error: "; "" for a stop that is not an error).
[[noreturn]] void fail(const std::string& line, int exit_code, const std::string& detail = "", bool alone = false,
                       std::string_view kind = "error: ") {
  std::fflush(stdout);
  const auto line_of = [&](bool name_rank) {
    const int rank = trident::error_rank() >= 0 ? trident::error_rank() : trident::dist::launcher_rank();
    const std::string where = name_rank && rank >= 0 && detail.empty() ? fmt::format("rank {}: ", rank) : "";
    return fmt::format("trident: {}{}{}\n", kind, where, detail.empty() ? line : detail);
  };
  if (alone && trident::dist::launched_by_mpi()) {
    std::fputs(line_of(true).c_str(), stderr);
    std::fflush(stderr);
    trident::dist::abort_job(exit_code);
  }
  if (trident::dist::launched_by_mpi()) trident::dist::set_last_words(line_of(true), exit_code);
  const trident::dist::FailureAgreement agreed = trident::dist::agree_on_failure(line);
  std::signal(SIGTERM, SIG_DFL);
  if (agreed.print) std::fputs(line_of(agreed.name_rank).c_str(), stderr);
  std::fflush(stderr);
  if (agreed.together) trident::dist::finalize_and_exit(exit_code);
  trident::dist::abort_job(exit_code);
}
}  // namespace

namespace {
// Under trident launch, the stop request launch sends every rank through mpirun (which forwards
// SIGUSR1/SIGUSR2 but ends the job on SIGINT/SIGTERM) becomes the SIGINT/SIGTERM the user sent:
// training saves a checkpoint and stops, other commands end as they would on that signal.
extern "C" void on_launch_stop_request(int sig) { std::raise(sig == SIGUSR1 ? SIGINT : SIGTERM); }
}  // namespace

std::string trident::cli::read_file_option(std::string_view flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  TRIDENT_CHECK(fs::exists(st), "{} '{}': no such file", flag, path);
  TRIDENT_CHECK(!fs::is_directory(st), "{} '{}': is a directory, not a file", flag, path);
  std::ifstream in(path, std::ios::binary);
  TRIDENT_CHECK(in.good(), "{} '{}': cannot open the file: {}", flag, path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  TRIDENT_CHECK(!in.bad(), "{} '{}': error reading the file", flag, path);
  return std::move(text).str();
}

void trident::cli::prepare_output_option(std::string_view flag, const std::string& path, bool directory) {
  namespace fs = std::filesystem;
  TRIDENT_CHECK(!path.empty(), "{}: an empty path", flag);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (directory) {
    TRIDENT_CHECK(!fs::exists(st) || fs::is_directory(st), "{} '{}': exists and is not a directory", flag, path);
  } else {
    TRIDENT_CHECK(!fs::is_directory(st), "{} '{}': is a directory (name the file to write)", flag, path);
  }
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  fs::create_directories(parent, ec);
  TRIDENT_CHECK(!ec, "{} '{}': cannot create the directory '{}': {}", flag, path, parent.string(), ec.message());
  TRIDENT_CHECK(fs::is_directory(parent), "{} '{}': '{}' is not a directory", flag, path, parent.string());
  TRIDENT_CHECK(::access(parent.c_str(), W_OK) == 0, "{} '{}': cannot write in the directory '{}': {}", flag, path,
                parent.string(), std::strerror(errno));
}

bool& trident::cli::verbose() {
  static bool on = false;
  return on;
}

int& trident::cli::exit_status() {
  static int status = 0;
  return status;
}

int main(int argc, char** argv) {
  if (const char* v = std::getenv("TRIDENT_LAUNCH_SIGNALS"); v != nullptr && std::strcmp(v, "1") == 0) {
    std::signal(SIGUSR1, on_launch_stop_request);
    std::signal(SIGUSR2, on_launch_stop_request);
  }
  CLI::App app{"trident: train large language models with 3D parallelism", "trident"};
  app.set_version_flag("--version", std::string("trident ") + trident::kVersion);
  bool& verbose = trident::cli::verbose();
  app.add_flag("-v,--verbose", verbose,
               "Print error details (source location), and at the start of training the whole resolved config");
  app.require_subcommand(1);

  trident::cli::add_info_command(app);
  trident::cli::add_tokenizer_command(app);
  trident::cli::add_preprocess_command(app);
  trident::cli::add_train_command(app);
  trident::cli::add_generate_command(app);
  trident::cli::add_eval_command(app);
  trident::cli::add_export_command(app);
  trident::cli::add_launch_command(app);
  trident::cli::add_plot_command(app);
  trident::cli::add_plan_command(app);

  // An unknown command would otherwise read "A subcommand is required": name it and the known ones.
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word.starts_with('-')) continue;  // the top-level options (-v, --help, --version)
    // mpirun's spelling, `trident launch -np 4`, among launch's own options (before its command).
    if (word == "launch") {
      static char n_flag[] = "-n";
      for (int j = i + 1; j < argc && std::string_view(argv[j]) != "--"; ++j)
        if (std::string_view(argv[j]) == "-np") argv[j] = n_flag;
    }
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known = known || sub->get_name() == word;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      fail(fmt::format("unknown command '{}' (commands: {}) (see trident --help)", word, names),
           static_cast<int>(CLI::ExitCodes::ExtrasError));
    }
    break;
  }

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
    // A flag from Megatron-LM's command line: name the trident key that does the same.
    if (const std::string hint = e.get_exit_code() == static_cast<int>(CLI::ExitCodes::ExtrasError)
                                     ? trident::cli::peer_flag_hint(argc, argv, e.what())
                                     : std::string();
        !hint.empty()) {
      fail(fmt::format("{} (see trident train --help-config)", hint), e.get_exit_code());
    }
    fail(fmt::format("{} (see {} --help)", e.what(), command), e.get_exit_code());
  } catch (const trident::Interrupted& e) {
    // A signal during a long wait of training's set-up (core/interrupt.h): the ranks stop as they would
    // for an error every one of them sees (all alike: one line and a clean exit; else the job ends), with
    // the exit status of a run a signal stopped.
    fail(fmt::format("{}, before the run's first step: nothing to save (exit status {}: the run did not finish)",
                     e.what(), trident::train::kExitInterrupted),
         trident::train::kExitInterrupted, "", false, "");
  } catch (const trident::dist::CollectiveTimeout& e) {
    fail(e.message(), 1, verbose ? std::string(e.what()) : std::string(), true);
  } catch (const trident::Error& e) {
    fail(e.message(), 1, verbose ? std::string(e.what()) : std::string());
  } catch (const std::exception& e) {
    fail(e.what(), 1);
  }
  trident::dist::finalize();
  return trident::cli::exit_status();
}
