// trident launch -n N [--hostfile FILE] [--] COMMAND...   (-np N, mpirun's spelling, is rewritten to -n N in main.cpp)
//
// A convenience wrapper over the launcher of the MPI library trident is linked with: Open MPI's mpirun
// or Hydra's mpiexec (MPICH and its derivatives); dist/launcher.h holds what differs between them
// (flags, hostfiles, signals). It runs COMMAND (usually `trident train ...`) on N ranks, oversubscribing
// the cores when N exceeds them (CPU ranks share cores; each rank then uses cores / ranks threads), as
// root when run as root, with idle ranks yielding the CPU, and tells the ranks whether the user's stdout
// is a terminal (so rank 0 shows its live progress line through the launcher).
// `trident launch -n 4 -- trident train cfg.toml` is `mpirun -np 4 ... trident train cfg.toml`.
// The launcher program is the first of the family's names on PATH whose --version is that family's
// (on a machine with both libraries `mpirun` is the default one's), or TRIDENT_MPIEXEC.
//
// Without a hostfile or a scheduler's allocation every rank runs on this host, so N is checked
// against what the host can start (max_local_ranks) before the launcher is asked: Open MPI would
// otherwise hang for minutes on a system limit.
//
// --hostfile FILE names the hosts, one a line with its slots, in either family's format (`node1 slots=2`
// or `node1:2`; converted for the launcher when it is the other's). Ranks fill each host's slots in order,
// so with 2 slots on two hosts ranks 0,1 run on the first and 2,3 on the second. It is checked first:
// Open MPI reports a missing one as an internal error, a directory as "input in flex scanner failed".
// The launcher starts the other hosts' ranks through ssh (or OMPI_MCA_plm_rsh_agent, HYDRA_LAUNCHER_EXEC),
// whose login environment lacks launch's: the TRIDENT_* variables set here are passed on, so that every
// host runs with the same settings.
//
// The launcher runs as a child in a process group of its own, so that a signal reaches it once, from here:
//  - the first SIGINT/SIGTERM is handed to every rank as a stop request: as SIGUSR1 for SIGINT, and
//    SIGUSR2 (mpirun) or SIGTERM (Hydra) for SIGTERM — mpirun would end the job on SIGINT/SIGTERM, Hydra
//    passes SIGINT with notes of its own and does not forward SIGUSR2 — which a trident rank started by
//    launch turns back into SIGINT / SIGTERM (see main.cpp), so that training saves its checkpoint and
//    every rank exits 0; launch then exits with the launcher's status (0 after a clean stop);
//  - a second one ends the job (mpirun: SIGTERM; Hydra: its second SIGINT);
//  - a third one, or the launcher still running 10 s after the second, kills its process group;
//  - Ctrl-Z (SIGTSTP) suspends the ranks too, and SIGCONT resumes them (mpirun forwards both; Hydra does
//    not, so launch signals this host's ranks, its descendants, itself).
// A job a rank's failure should have ended ("trident: error: ..." on the launcher's stderr) whose launcher
// is still running kEndAfterFailure later is ended (launcher killed, exit status 1) with a line saying so:
// mpirun ends a job only once every host's daemon has confirmed its ranks are gone, and waits for ever
// for a host it cannot reach (a cut link, a host that went down), while the ranks there end by their
// own collective timeout.
// The launcher's stderr passes through launch, which drops its banners about an exit that trident
// already reported in one line (MPI_ABORT, "exited with non-zero status", Hydra's "BAD TERMINATION") or
// that launch asked for.
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>

#include "commands.h"
#include "launcher_run.h"
#include "trident/core/error.h"
#include "trident/dist/launcher.h"
#include "trident/dist/mpi_communicator.h"

namespace trident::cli {

namespace {

struct LaunchOptions {
  int ranks = 1;
  std::string hostfile;
  bool dry_run = false;
  std::vector<std::string> command;
};

// How many ranks this host can start, and what bounds it (for the message). CPU ranks share the
// cores; past a few dozen per core a job only thrashes, so the bound is 32 per core. mpirun holds
// file descriptors for every local rank (Open MPI 4.1: 2 per running rank, measured, and up to 8
// while it starts one: the pipes of its standard streams; 100000 ranks hit "system limit on number
// of pipes" and hung), so the open-file limit allows a conservative 8 per rank; and each rank is a
// process with a few threads (OpenMP, Open MPI's progress threads), which RLIMIT_NPROC counts.
constexpr long kRanksPerCore = 32;
constexpr long kFilesPerRank = 8;
constexpr long kFilesReserved = 64;  // mpirun's own
constexpr long kThreadsPerRank = 8;

struct RankBound {
  long ranks;
  std::string why;
};

RankBound max_local_ranks() {
  const long cores = std::max(1u, std::thread::hardware_concurrency());
  RankBound bound{kRanksPerCore * cores, fmt::format("{} per core × {} cores", kRanksPerCore, cores)};
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    const long n = (static_cast<long>(std::min<rlim_t>(files.rlim_cur, 1u << 30)) - kFilesReserved) / kFilesPerRank;
    if (n < bound.ranks) {
      bound = {std::max(1L, n), fmt::format("the open-file limit (ulimit -n) of {} allows about {} per rank",
                                            files.rlim_cur, kFilesPerRank)};
    }
  }
  rlimit procs{};
  // Root is not held to RLIMIT_NPROC.
  if (::geteuid() != 0 && ::getrlimit(RLIMIT_NPROC, &procs) == 0 && procs.rlim_cur != RLIM_INFINITY) {
    const long n = static_cast<long>(std::min<rlim_t>(procs.rlim_cur, 1u << 30)) / kThreadsPerRank;
    if (n < bound.ranks) {
      bound = {std::max(1L, n), fmt::format("the process limit (ulimit -u) of {} allows about {} threads per rank",
                                            procs.rlim_cur, kThreadsPerRank)};
    }
  }
  return bound;
}

// A hostfile (ours or Open MPI's default) or a batch scheduler's allocation provides the slots:
// mpirun then checks N against them itself, with a clear message.
bool slots_given(const LaunchOptions& o) {
  if (!o.hostfile.empty()) return true;
  for (const char* v : {"SLURM_JOB_ID", "PBS_JOBID", "PBS_NODEFILE", "LSB_JOBID", "OMPI_MCA_orte_default_hostfile",
                        "OMPI_MCA_rds_hostfile_path", "HYDRA_HOST_FILE"}) {
    const char* value = std::getenv(v);
    if (value != nullptr && *value != '\0') return true;
  }
  return false;
}

// A file in $TMPDIR (else /tmp), removed with this object.
class TempFile {
 public:
  explicit TempFile(std::string_view stem) {
    const char* dir = std::getenv("TMPDIR");
    path_ = fmt::format("{}/{}.XXXXXX", dir != nullptr && *dir != '\0' ? dir : "/tmp", stem);
    fd_ = ::mkstemp(path_.data());
    TRIDENT_CHECK(fd_ >= 0, "launch: cannot create a file '{}': {}", path_, std::strerror(errno));
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  void write(const std::string& text) const {
    TRIDENT_CHECK(::write(fd_, text.data(), text.size()) == static_cast<ssize_t>(text.size()),
                  "launch: cannot write '{}': {}", path_, std::strerror(errno));
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// The hostfile for the launcher: --hostfile as given when it is in the launcher's format, else a copy
// in that format (kept in `converted`, removed when launch ends). The launcher checks the rest: unknown
// hosts, too few slots, each with a message naming the host or the count.
std::string hostfile_for(const dist::Launcher& launcher, const std::string& path, std::optional<TempFile>& converted) {
  const std::string text = read_file_option("launch: --hostfile", path);
  bool native = true;
  const auto hosts = dist::parse_hostfile(text, path, launcher.family(), native);
  if (native) return path;
  converted.emplace("trident-hostfile");
  converted->write(dist::format_hostfile(hosts, launcher.family()));
  return converted->path();
}

// The TRIDENT_* variables of launch's environment that the ranks should see on every host (not
// those launch sets for the ranks itself).
std::vector<std::string> trident_variables() {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (!name.starts_with("TRIDENT_") || name == "TRIDENT_LAUNCH_SIGNALS" || name == "TRIDENT_STDOUT_IS_TTY" ||
        name == "TRIDENT_MPIEXEC") {
      continue;
    }
    names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The first executable `name` in PATH's directories ("" if none).
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const auto colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    const std::string file = fmt::format("{}/{}", dir.empty() ? "." : dir, name);
    if (::access(file.c_str(), X_OK) == 0) return file;
    if (colon == std::string_view::npos) return "";
    dirs.remove_prefix(colon + 1);
  }
}

// What `program --version` prints (stdout and stderr), "" if it cannot run.
std::string version_of(const std::string& program) {
  std::string quoted = "'";
  for (char c : program) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  std::FILE* p = ::popen((quoted + "' --version 2>&1 </dev/null").c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[1024];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  ::pclose(p);
  return out;
}

// The launcher program: TRIDENT_MPIEXEC, else the first of the family's names on PATH whose --version is
// the family's (a machine with Open MPI and MPICH points `mpirun` and `mpiexec` at one of them).
std::string launcher_program(const dist::Launcher& launcher, const std::string& library) {
  if (const char* v = std::getenv("TRIDENT_MPIEXEC"); v != nullptr && *v != '\0') return v;
  std::vector<std::string> seen;
  for (const std::string& name : launcher.programs()) {
    const std::string file = on_path(name);
    if (file.empty()) continue;
    const std::string version = version_of(file);
    for (const std::string& marker : launcher.version_markers()) {
      if (version.find(marker) != std::string::npos) return file;
    }
    seen.push_back(file);
  }
  TRIDENT_FAIL("launch: trident is built against {} ({}), but no launcher of it is on PATH ({}{}); install Debian's {} "
               "(or load the cluster's module), or name the launcher in TRIDENT_MPIEXEC",
               dist::family_name(launcher.family()), library, fmt::join(launcher.programs(), ", "),
               seen.empty() ? std::string(" not found")
                            : fmt::format(": {} belong to another MPI library", fmt::join(seen, ", ")),
               launcher.package());
}

void launch(const LaunchOptions& o) {
  TRIDENT_CHECK(o.ranks >= 1, "launch: -n must be at least 1, got {}", o.ranks);
  TRIDENT_CHECK(!o.command.empty(), "launch: no command given (e.g. trident launch -n 4 -- trident train cfg.toml)");
  const std::string library = dist::mpi_library_version();
  const dist::Launcher launcher(dist::mpi_family_of(library));
  dist::LaunchPlan plan;
  plan.ranks = o.ranks;
  std::optional<TempFile> converted_hostfile;
  if (!o.hostfile.empty()) plan.hostfile = hostfile_for(launcher, o.hostfile, converted_hostfile);
  if (!slots_given(o)) {
    const RankBound bound = max_local_ranks();
    TRIDENT_CHECK(o.ranks <= bound.ranks,
                  "launch: -n {} is more ranks than this host can start (at most {}: {}); for more, give --hostfile "
                  "or launch inside a scheduler's allocation (Slurm, PBS)",
                  o.ranks, bound.ranks, bound.why);
  }
  plan.set_env.emplace_back("TRIDENT_LAUNCH_SIGNALS=1");  // Launcher::stop_signal
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (o.hostfile.empty() && static_cast<unsigned>(o.ranks) > cores) {
    // More ranks than cores: let idle OpenMP threads sleep instead of spinning on a shared core.
    plan.oversubscribe = true;
    plan.set_env.emplace_back("OMP_WAIT_POLICY=passive");
  }
  plan.as_root = ::geteuid() == 0;
  plan.pass_env = trident_variables();
  // The ranks' stdout is a pseudo-terminal or pipe of the launcher's whatever the user's is: tell them
  // whether the user watches a terminal (live progress line) or output goes to a file or pipe (plain lines).
  plan.set_env.emplace_back(::isatty(STDOUT_FILENO) ? "TRIDENT_STDOUT_IS_TTY=1" : "TRIDENT_STDOUT_IS_TTY=0");
  // The trident binary itself when the command starts with "trident".
  plan.command = o.command;
  if (plan.command.front() == "trident") {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) plan.command.front() = std::string(self, static_cast<std::size_t>(n));
  }
  std::vector<std::string> args = launcher.command_line(launcher_program(launcher, library), plan);
  if (o.dry_run) {
    fmt::print("{}\n", fmt::join(args, " "));
    return;
  }
  std::fflush(stdout);
  exit_status() = run_launcher(args, launcher);
}

}  // namespace

void add_launch_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch", "Run a command on N ranks through the MPI library's launcher: mpirun, mpiexec.hydra (e.g. trident train)");
  auto o = std::make_shared<LaunchOptions>();
  cmd->add_option("-n,--ranks", o->ranks, "Number of ranks (mpirun's -np N works too)")->required();
  cmd->add_option("--hostfile", o->hostfile,
                  "Run on several machines: a hostfile, one host a line with its ranks (Open MPI's 'node1 slots=2' or "
                  "Hydra's 'node1:2'); ranks fill the hosts in order. The launcher reaches the other hosts by ssh (or "
                  "OMPI_MCA_plm_rsh_agent / HYDRA_LAUNCHER_EXEC); the TRIDENT_* variables set here are passed to every rank")
      ->type_name("FILE");
  cmd->add_flag("--dry-run", o->dry_run, "Print the launcher's command line instead of running it");
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
