#include "trident/dist/watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "trident/core/error.h"
#include "trident/dist/flight_recorder.h"

namespace trident::dist {

namespace {

using Clock = std::chrono::steady_clock;

// How often operations in flight are polled.
constexpr std::chrono::milliseconds kPollInterval{100};
// The watchdog's thread woken this much later than it asked was not running at all.
constexpr double kSuspendedAfter_s = 3.0;

}  // namespace

double peer_wait_s(double timeout_s) { return std::clamp(timeout_s / 2, 0.0, 5.0); }

namespace {

std::string timed_out(const std::string& what, double timeout_s) {
  return fmt::format("{} timed out after {:.0f} s (a peer rank is stuck, dead or did not call it)", what, timeout_s);
}

}  // namespace

Clock::time_point watchdog_deadline_after(double seconds) {
  const double s = std::clamp(seconds, 0.0, 1e8);
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

Watched::Watched(std::string what, double timeout_s, WatchdogFailure on_failure)
    : what_(std::move(what)),
      timeout_s_(timeout_s),
      deadline_(watchdog_deadline_after(timeout_s)),
      on_failure_(std::move(on_failure)) {}

struct Watchdog::State {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::shared_ptr<Watched>> inflight;
  bool armed = false;
  std::string armed_what;
  double armed_timeout_s = 0;
  Clock::time_point armed_deadline;
  WatchdogFailure armed_failure;
  std::uint64_t armed_ticket = 0;        // the armed call's flight-recorder entry (0: none)
  Clock::time_point armed_half;          // half way to its deadline: leave its note
  bool armed_noted = true;
  // The thread sleeps untimed (idle) or until `wake`; arm() and track() wake it
  // only when it would otherwise sleep past their deadline (waking it on every
  // call would cost a context switch per collective). `idle` is true only inside the untimed wait: were it
  // true from the start, a first arm() made before the thread's first wait would leave it true for good,
  // and every later arm() would wake the thread. (Before that wait, `wake` = max makes arm() wake it.)
  bool idle = false;
  Clock::time_point wake = Clock::time_point::max();
  std::thread thread;
};

Watchdog& Watchdog::instance() {
  static Watchdog* w = new Watchdog();  // never destroyed: calls may be in flight at exit
  return *w;
}

Watchdog::Watchdog() : state_(std::make_unique<State>()) {
  state_->thread = std::thread([this] { run(); });
  state_->thread.detach();
}

void Watchdog::arm(std::string what, double timeout_s, WatchdogFailure on_failure) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.armed = true;
  s.armed_what = std::move(what);
  s.armed_timeout_s = timeout_s;
  s.armed_deadline = watchdog_deadline_after(timeout_s);
  s.armed_failure = std::move(on_failure);
  s.armed_ticket = 0;
  s.armed_noted = true;
  if (s.idle || s.armed_deadline < s.wake) s.cv.notify_one();
}

void Watchdog::arm_call(std::uint64_t ticket, double timeout_s, Clock::time_point now) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.armed = true;
  s.armed_what.clear();
  s.armed_timeout_s = timeout_s;
  const double t = std::clamp(timeout_s, 0.0, 1e8);
  s.armed_deadline = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t));
  s.armed_half = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t / 2));
  s.armed_failure = {};
  s.armed_ticket = ticket;
  s.armed_noted = false;
  if (s.idle || s.armed_half < s.wake) s.cv.notify_one();
}

void Watchdog::disarm() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.armed = false;
  s.armed_failure = {};  // drops what its before_exit holds (not the last owner: the caller holds it)
}

void Watchdog::track(std::shared_ptr<Watched> op) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.inflight.push_back(std::move(op));
  if (s.idle || Clock::now() + kPollInterval < s.wake) s.cv.notify_one();
}

void Watchdog::fatal(const std::string& message, const WatchdogFailure& on_failure) {
  const int rank = error_rank();
  std::string who;
  if (rank >= 0) who = on_failure.name_host ? fmt::format("rank {} on {}: ", rank, host_name()) : fmt::format("rank {}: ", rank);
  std::fprintf(stderr, "trident: error: %s%s%s\n", who.c_str(), message.c_str(), on_failure.consequence.c_str());
  // What this rank did last (the flight recorder): a peer whose newest entry on the stalled group is an
  // older sequence number never reached the call.
  const std::vector<std::string> last = flight::report();
  if (!last.empty()) {
    std::fprintf(stderr, "trident: %slast collectives, oldest first:\n", who.c_str());
    for (const std::string& line : last) std::fprintf(stderr, "trident: %s  %s\n", who.c_str(), line.c_str());
  }
  std::fflush(stderr);
  if (on_failure.before_exit) on_failure.before_exit();
  std::_Exit(1);
}

void Watchdog::run() {
  State& s = *state_;
  std::vector<std::shared_ptr<Watched>> finished;
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    if (!s.armed && s.inflight.empty()) {
      // Nothing to watch, but the last armed call's deadline has not passed: sleep until it rather than
      // idle. A short blocking call is usually disarmed before this thread gets to run; were it to idle
      // then, every arm() would have to wake it, a context switch per call (and a thread competing with
      // the ranks when they oversubscribe the cores). Woken at that deadline, it checks what is armed then.
      if (Clock::now() < s.armed_deadline) {
        s.wake = s.armed_deadline;
        s.cv.wait_until(lock, s.wake);
        continue;
      }
      s.idle = true;
      s.wake = Clock::time_point::max();
      s.cv.wait(lock);
      s.idle = false;
      continue;
    }
    s.wake = !s.armed ? Clock::time_point::max() : s.armed_noted ? s.armed_deadline : s.armed_half;
    if (!s.inflight.empty()) s.wake = std::min(s.wake, Clock::now() + kPollInterval);
    const Clock::time_point woke_for = s.wake;
    s.cv.wait_until(lock, s.wake);
    const Clock::time_point now = Clock::now();
    // Woken far later than asked: the whole process was stopped (SIGSTOP, then SIGCONT) or suspended,
    // so a deadline that passed meanwhile is this process's stall, not a peer's.
    const double late_s = woke_for == Clock::time_point::max() ? 0.0 : std::chrono::duration<double>(now - woke_for).count();
    const std::string suspended =
        late_s > kSuspendedAfter_s ? fmt::format(" (this process itself did not run for {:.0f} s: it was stopped or suspended)", late_s) : "";
    // A process that was stopped leaves no note: it is the one its peers wait for.
    if (s.armed && !s.armed_noted && now >= s.armed_half) {
      if (suspended.empty()) flight::note_waiting(s.armed_ticket);
      s.armed_noted = true;
    }
    if (s.armed && now >= s.armed_deadline) {
      const std::string what = s.armed_ticket ? flight::describe(s.armed_ticket) : s.armed_what;
      fatal(timed_out(what, s.armed_timeout_s) + suspended +
                (suspended.empty() ? flight::peers(s.armed_ticket, peer_wait_s(s.armed_timeout_s)) : ""),
            s.armed_failure);
    }
    std::string failure;
    for (std::shared_ptr<Watched>& op : s.inflight) {
      switch (op->poll(failure)) {
        case Watched::Status::done: finished.push_back(std::move(op)); continue;
        case Watched::Status::failed: fatal(failure, op->on_failure());
        case Watched::Status::exiting: return;  // a finished run must not end with this thread's line
        case Watched::Status::running: break;
      }
      if (now > op->deadline()) fatal(timed_out(op->what(), op->timeout_s()) + suspended, op->on_failure());
    }
    std::erase(s.inflight, nullptr);
    if (!finished.empty()) {
      // Dropped outside the lock: the last owner of a communicator may release it.
      lock.unlock();
      finished.clear();
      lock.lock();
    }
  }
}

}  // namespace trident::dist
