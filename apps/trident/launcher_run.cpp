// Runs an MPI launcher (mpirun, mpiexec.hydra) for `trident launch` (launch_command.cpp): its own process
// group, the user's signals turned into what the launcher passes on (dist::Launcher), its stderr relayed
// without the banners about an exit trident already reported, and a job a rank's failure should have
// ended but whose launcher waits (a host it cannot reach) ended after kEndAfterFailure.
#include "launcher_run.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "trident/core/error.h"
#include "trident/train/trainer.h"

namespace trident::cli {

namespace {

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

}  // namespace

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

}  // namespace trident::cli
