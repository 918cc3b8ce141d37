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
//  - the first SIGINT/SIGTERM is handed to every rank as a stop request (Hydra forwards both as they are;
//    mpirun would end the job, but forwards SIGUSR1 / SIGUSR2 untouched, which a trident rank started by
//    launch turns back into SIGINT / SIGTERM: see main.cpp), so that training saves its checkpoint and
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
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>

#include "commands.h"
#include "trident/core/error.h"
#include "trident/dist/launcher.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/train/trainer.h"

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

volatile sig_atomic_t g_signals = 0;      // SIGINT/SIGTERM received so far
volatile sig_atomic_t g_last_signal = 0;  // the latest of them
volatile sig_atomic_t g_suspend = 0;      // SIGTSTP (Ctrl-Z) received, not yet acted on
extern "C" void on_launch_signal(int sig) {
  g_last_signal = sig;
  g_signals = g_signals + 1;
}
extern "C" void on_launch_suspend(int) { g_suspend = 1; }

// Passes the launcher's stderr through, line by line, leaving out its banners (blocks between two rules:
// Open MPI's of dashes, Hydra's of equals signs) and log lines that only repeat an exit trident reported
// or launch asked for.
class StderrRelay {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StderrRelay(int out) : out_(out) {}
  bool stop_requested = false;
  bool end_requested = false;  // a second signal: the launcher ends the job
  // When the first "trident: error: " line went through (a rank failed), if one did.
  std::optional<Clock::time_point> error_at() const { return error_at_; }
  // Whether a rank said it stopped on the signal ("trident: stopped by signal ...", its status 75).
  bool stop_reported() const { return stop_reported_; }

  void feed(const char* data, std::size_t n) {
    partial_.append(data, n);
    std::size_t start = 0;
    for (std::size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
      line(partial_.substr(start, nl + 1 - start));
    }
    partial_.erase(0, start);
    // A partial line that cannot start a banner goes out now (a progress line, a prompt).
    if (!partial_.empty() &&
        (mid_line_ || (!in_block_ && partial_[0] != '-' && partial_[0] != '=' && partial_[0] != '['))) {
      write(partial_);
      mid_line_ = true;
      partial_.clear();
    }
  }
  void finish() {
    if (!partial_.empty()) line(partial_);
    partial_.clear();
    for (const auto& l : block_) write(l);
    block_.clear();
    in_block_ = false;
  }

 private:
  static bool is_rule(const std::string& l) {
    std::size_t marks = 0;
    for (char c : l) {
      if (c == l[0] && (c == '-' || c == '=')) {
        ++marks;
      } else if (c != '\n' && c != '\r') {
        return false;
      }
    }
    return marks >= 20;
  }
  static bool has(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

  void line(const std::string& l) {
    if (mid_line_) {  // the rest of a line already started
      write(l);
      mid_line_ = l.back() != '\n';
      return;
    }
    if (is_rule(l)) {
      block_.push_back(l);
      if (in_block_) {
        close_block();
      } else {
        in_block_ = true;
      }
      return;
    }
    if (in_block_) {
      block_.push_back(l);
      if (block_.size() > 200) {  // not a banner after all
        for (const auto& b : block_) write(b);
        block_.clear();
        in_block_ = false;
      }
      return;
    }
    if (l.starts_with("trident: error: ")) {
      error_reported_ = true;
      if (!error_at_) error_at_ = Clock::now();
    }
    if (l.starts_with("trident: ") && has(l, "stopped by signal")) stop_reported_ = true;
    // "[host:pid] ... ORTE_ERROR_LOG: ..." and the help aggregation notes after an abort.
    if (l.starts_with("mpirun: Forwarding signal")) return;  // a signal launch forwarded itself
    // Hydra's notes on the SIGINTs that end the job ("Sending Ctrl-C to processes as requested", "Ctrl-C
    // caught... cleaning up processes"), and its proxies' and its own log lines as it ends the job.
    if (end_requested && (l.starts_with("[mpiexec@") || l.starts_with("[proxy:") || l.starts_with("Ctrl-C caught"))) {
      return;
    }
    // MPICH's line per rank that MPI_Abort ended ("Abort(1) on node 0 (rank 0 in comm 0): application
    // called MPI_Abort(...)"), after trident's own line.
    if ((error_reported_ || stop_requested) && l.starts_with("Abort(") && has(l, "MPI_Abort")) return;
    if ((error_reported_ || stop_requested) && l.starts_with("[") &&
        (has(l, "ORTE_ERROR_LOG") || has(l, "help message help-mpi-api.txt") || has(l, "orte_base_help_aggregate"))) {
      return;
    }
    write(l);
  }
  void close_block() {
    std::string text;
    for (const auto& b : block_) text += b;
    // "exiting improperly": a rank that failed before starting MPI waited for its peers in MPI_Init,
    // and a peer that does not use MPI ended normally.
    const bool after_exit = has(text, "MPI_ABORT was invoked") || has(text, "exited with non-zero status") ||
                            has(text, "terminated normally, but") || has(text, "exiting improperly") ||
                            has(text, "BAD TERMINATION");
    const bool after_stop = has(text, "exited on signal") || has(text, "killed");
    const bool drop = (error_reported_ && after_exit) || (stop_requested && (after_exit || after_stop));
    if (!drop) {
      for (const auto& b : block_) write(b);
    }
    block_.clear();
    in_block_ = false;
  }
  void write(const std::string& s) const {
    for (std::size_t done = 0; done < s.size();) {
      const ssize_t w = ::write(out_, s.data() + done, s.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;
      done += static_cast<std::size_t>(w);
    }
  }

  int out_;
  std::string partial_;
  bool mid_line_ = false;
  bool in_block_ = false;
  bool error_reported_ = false;
  bool stop_reported_ = false;
  std::optional<Clock::time_point> error_at_;
  std::vector<std::string> block_;
};

// How long mpirun may take to end a job after a rank reported its failure (normally well under a
// second, a few seconds on a loaded host) before launch ends mpirun itself.
constexpr std::chrono::seconds kEndAfterFailure{15};

// Sends `sig` to every descendant of `root` on this host (Hydra starts its proxy and the ranks in
// sessions of their own, out of reach of a signal to its process group).
void signal_descendants(pid_t root, int sig) {
  std::vector<std::pair<pid_t, pid_t>> parent_of;  // (pid, parent pid)
  if (DIR* proc = ::opendir("/proc")) {
    while (const dirent* e = ::readdir(proc)) {
      char* end = nullptr;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (end == e->d_name || *end != '\0') continue;
      std::FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
      if (f == nullptr) continue;
      char buf[512];
      const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
      std::fclose(f);
      buf[n] = '\0';
      // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after the last ')'.
      const char* close = std::strrchr(buf, ')');
      long ppid = 0;
      if (close != nullptr && std::sscanf(close + 1, " %*c %ld", &ppid) == 1) {
        parent_of.emplace_back(static_cast<pid_t>(pid), static_cast<pid_t>(ppid));
      }
    }
    ::closedir(proc);
  }
  std::vector<pid_t> found = {root};
  for (std::size_t i = 0; i < found.size(); ++i) {
    for (const auto& [pid, ppid] : parent_of) {
      if (ppid == found[i]) found.push_back(pid);
    }
  }
  for (std::size_t i = 1; i < found.size(); ++i) ::kill(found[i], sig);
}

// Kills the launcher's process group and, for Hydra, this host's ranks and proxy (in sessions of their own).
void kill_launcher(pid_t pid, const dist::Launcher& launcher) {
  if (!launcher.ranks_in_launcher_group()) signal_descendants(pid, SIGKILL);
  ::kill(-pid, SIGKILL);
}

// Runs the launcher (args, the program first) as described at the top; returns the exit status for launch.
int run_launcher(std::vector<std::string>& args, const dist::Launcher& launcher) {
  const std::string program = args.front().substr(args.front().rfind('/') + 1);
  int err_pipe[2], exec_pipe[2];
  TRIDENT_CHECK(::pipe2(err_pipe, O_CLOEXEC) == 0 && ::pipe2(exec_pipe, O_CLOEXEC) == 0,
                "launch: cannot create a pipe: {}", std::strerror(errno));
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  struct sigaction action {};
  action.sa_handler = on_launch_signal;
  ::sigemptyset(&action.sa_mask);
  struct sigaction old_int {}, old_term {}, old_tstp {};
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);
  struct sigaction suspend {};
  suspend.sa_handler = on_launch_suspend;
  ::sigemptyset(&suspend.sa_mask);
  ::sigaction(SIGTSTP, &suspend, &old_tstp);
  const auto restore_signals = [&] {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
    ::sigaction(SIGTSTP, &old_tstp, nullptr);
  };

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  TRIDENT_CHECK(pid >= 0, "launch: cannot start mpirun: fork: {}", std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // launch killed outright: mpirun ends the job
    if (::getppid() != parent) ::_exit(127);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGTSTP, SIG_DFL);
    ::dup2(err_pipe[1], STDERR_FILENO);  // dup2 clears O_CLOEXEC on the copy
    ::execvp(argv[0], argv.data());
    const int e = errno;
    (void)!::write(exec_pipe[1], &e, sizeof(e));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(err_pipe[1]);
  ::close(exec_pipe[1]);
  int exec_errno = 0;
  const bool exec_failed = ::read(exec_pipe[0], &exec_errno, sizeof(exec_errno)) == sizeof(exec_errno);
  ::close(exec_pipe[0]);
  if (exec_failed) {
    ::waitpid(pid, nullptr, 0);
    ::close(err_pipe[0]);
    restore_signals();
    TRIDENT_FAIL("launch: cannot run {}: {} (install Debian's {})", args.front(), std::strerror(exec_errno),
                 launcher.package());
  }

  StderrRelay relay(STDERR_FILENO);
  int handled = 0;   // signals acted on
  int first_signal = 0;
  std::chrono::steady_clock::time_point term_sent{};
  bool pipe_open = true, killed = false, ended_after_failure = false;
  int status = 0;
  for (;;) {
    const int seen = g_signals;
    while (handled < seen) {
      ++handled;
      if (handled == 1) {
        first_signal = g_last_signal;
        relay.stop_requested = true;
        ::kill(pid, launcher.stop_signal(first_signal));  // a stop request for every rank
      } else if (handled == 2) {
        relay.end_requested = true;
        for (int i = 0; i < launcher.end_signal_count(); ++i) {  // the launcher ends the job
          if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
          ::kill(pid, launcher.end_signal());
        }
        term_sent = std::chrono::steady_clock::now();
      } else if (!killed) {
        kill_launcher(pid, launcher);
        killed = true;
      }
    }
    if (g_suspend) {
      // Ctrl-Z: the launcher is in its own process group, so the terminal's signal missed it. mpirun
      // forwards SIGTSTP to the ranks; Hydra does not, so this host's ranks get it from here. launch
      // stops itself, and on fg passes SIGCONT on the same way.
      g_suspend = 0;
      if (launcher.forwards_suspend()) {
        ::kill(pid, SIGTSTP);
      } else {
        signal_descendants(pid, SIGSTOP);  // a rank leads its own session, where SIGTSTP would be discarded
      }
      ::raise(SIGSTOP);
      if (launcher.forwards_suspend()) {
        ::kill(pid, SIGCONT);
      } else {
        signal_descendants(pid, SIGCONT);
      }
    }
    if (handled < 2 && !killed && relay.error_at() &&
        std::chrono::steady_clock::now() - *relay.error_at() > kEndAfterFailure) {
      // A rank failed but the job goes on: mpirun waits for a host it cannot reach. SIGKILL, not SIGTERM:
      // an mpirun whose abort is under way takes SIGTERM for "terminate forcibly" and crashes doing so
      // (Open MPI 4.1: a segmentation fault in PMIx_Finalize, with its backtrace).
      const std::string note = fmt::format(
          "trident: error: launch: {} has not ended the job {} s after a rank failed (a host it cannot "
          "reach?); killing {}\n",
          program, kEndAfterFailure.count(), program);
      relay.finish();  // what the launcher wrote so far, before this line
      (void)!::write(STDERR_FILENO, note.data(), note.size());
      kill_launcher(pid, launcher);
      killed = ended_after_failure = true;
    }
    if (handled == 2 && !killed && std::chrono::steady_clock::now() - term_sent > std::chrono::seconds(10)) {
      kill_launcher(pid, launcher);
      killed = true;
    }
    if (pipe_open) {
      pollfd p{err_pipe[0], POLLIN, 0};
      const int r = ::poll(&p, 1, 100);
      if (r > 0) {
        char buf[4096];
        const ssize_t n = ::read(err_pipe[0], buf, sizeof(buf));
        if (n > 0) {
          relay.feed(buf, static_cast<std::size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          pipe_open = false;
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
  }
  // The launcher is gone: what it (or a rank holding its stderr) still wrote.
  ::fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  char buf[4096];
  for (ssize_t n; (n = ::read(err_pipe[0], buf, sizeof(buf))) > 0;) relay.feed(buf, static_cast<std::size_t>(n));
  relay.finish();
  ::close(err_pipe[0]);
  restore_signals();
  if (ended_after_failure) return 1;  // the ranks' failure, not the signal launch sent the launcher
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    // Stopped on request: the ranks' status when they stopped cleanly (0, or training's
    // kExitInterrupted: saved, not finished), else as a shell reports a process ended by that signal.
    const bool clean = code == 0 || code == train::kExitInterrupted;
    // Hydra, signalled, sometimes exits 0 whatever its ranks' status (MPICH 4.0: 1 run in 6): the ranks'
    // own line tells that they stopped rather than finished.
    if (code == 0 && first_signal != 0 && relay.stop_reported()) return train::kExitInterrupted;
    return !clean && first_signal != 0 ? 128 + first_signal : code;
  }
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
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
