// trident launch -n N [--hostfile FILE] [--] COMMAND...
//
// A convenience wrapper over Open MPI's mpirun: adds --oversubscribe when N
// exceeds the cores (CPU ranks share cores; each rank then uses
// cores / ranks threads), --allow-run-as-root when run as root, lets idle ranks
// yield the CPU, tells the ranks whether the user's stdout is a terminal
// (so rank 0 shows its live progress line through mpirun), and runs COMMAND (usually `trident train ...`) on N ranks.
// `trident launch -n 4 -- trident train cfg.toml` is `mpirun -np 4 ... trident train cfg.toml`.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "commands.h"
#include "trident/core/error.h"

namespace trident::cli {

namespace {

struct LaunchOptions {
  int ranks = 1;
  std::string hostfile;
  bool dry_run = false;
  std::vector<std::string> command;
};

void launch(const LaunchOptions& o) {
  TRIDENT_CHECK(o.ranks >= 1, "launch: -n must be at least 1, got {}", o.ranks);
  TRIDENT_CHECK(!o.command.empty(), "launch: no command given (e.g. trident launch -n 4 -- trident train cfg.toml)");
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(o.ranks), "--bind-to", "none",
                                   "-x", "OMPI_MCA_mpi_yield_when_idle=1"};
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (o.hostfile.empty() && static_cast<unsigned>(o.ranks) > cores) {
    // More ranks than cores: let idle OpenMP threads sleep instead of spinning on a shared core.
    args.insert(args.end(), {"--oversubscribe", "-x", "OMP_WAIT_POLICY=passive"});
  }
  if (!o.hostfile.empty()) {
    args.push_back("--hostfile");
    args.push_back(o.hostfile);
  }
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  // The ranks' stdout is a pseudo-terminal of mpirun's whatever the user's is: tell them whether
  // the user watches a terminal (live progress line) or output goes to a file or pipe (plain lines).
  args.insert(args.end(), {"-x", ::isatty(STDOUT_FILENO) ? "TRIDENT_STDOUT_IS_TTY=1" : "TRIDENT_STDOUT_IS_TTY=0"});
  // The trident binary itself when the command starts with "trident".
  std::vector<std::string> command = o.command;
  if (command.front() == "trident") {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) command.front() = std::string(self, static_cast<std::size_t>(n));
  }
  args.insert(args.end(), command.begin(), command.end());
  if (o.dry_run) {
    fmt::print("{}\n", fmt::join(args, " "));
    return;
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execvp("mpirun", argv.data());
  TRIDENT_FAIL("launch: cannot run mpirun: {} (install Debian's openmpi-bin)", std::strerror(errno));
}

}  // namespace

void add_launch_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("launch", "Run a command on N ranks through mpirun (e.g. trident train)");
  auto o = std::make_shared<LaunchOptions>();
  cmd->add_option("-n,--ranks", o->ranks, "Number of ranks")->required();
  cmd->add_option("--hostfile", o->hostfile, "mpirun hostfile for several machines");
  cmd->add_flag("--dry-run", o->dry_run, "Print the mpirun command instead of running it");
  // COMMAND is taken whole, in order, from what CLI11 leaves unparsed. A
  // positional that accepted words would take only COMMAND's bare words and
  // drop its options (`trident train cfg.toml --resume` would silently start
  // over), and would let `-n` in `echo -n 5` be parsed as launch's own. This
  // positional accepts nothing (so with prefix_command() the first word of
  // COMMAND and all after it stay unparsed); it exists so that `--` is kept
  // here rather than handed back to the top-level parser.
  cmd->add_option("command", o->command, "The command to run on every rank (after `--`, or after launch's options)")
      ->check([](const std::string&) { return std::string("taken whole as COMMAND"); });
  cmd->validate_positionals();
  cmd->prefix_command();
  cmd->callback([o, cmd] {
    o->command = cmd->remaining();
    if (!o->command.empty() && o->command.front() == "--") o->command.erase(o->command.begin());
    launch(*o);
  });
}

}  // namespace trident::cli
