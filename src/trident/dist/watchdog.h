// Watchdog: the one thread per process that keeps the deadlines of every
// communicator (MpiCommunicator, NcclCommunicator).
//
// It watches two kinds of things:
//  - the one blocking host call of the moment (an MPI collective, an NCCL
//    communicator's creation or first transfer): arm() before the call,
//    disarm() after it (or hold an ArmedCall);
//  - operations in flight that a non-blocking wait() cannot time out (NCCL
//    work on a stream): track() a Watched whose poll() the watchdog calls
//    every 100 ms until it reports done.
// When a deadline passes, or a poll reports a failure, the watchdog prints one
// line to stderr, "trident: error: rank R: <what> timed out after T s (...)",
// runs the failure's before_exit step and ends the process with status 1,
// which ends the job (mpirun and srun end every rank when one exits).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace trident::dist {

// What the watchdog does, besides printing its line, when a watched call or
// operation fails.
struct WatchdogFailure {
  // Name the host after the rank ("rank 1 on node3: ") rather than the rank alone.
  bool name_host = false;
  // Appended to the line, e.g. "; aborting the NCCL communicator and ending this process".
  std::string consequence;
  // Run after the line is printed, before the process ends (e.g. abort an NCCL
  // communicator). Runs on the watchdog's thread; must not block nor throw.
  std::function<void()> before_exit;
};

// An operation in flight, polled by the watchdog's thread until it is done.
class Watched {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Status {
    running,  // not finished; times out at deadline()
    done,     // finished: the watchdog drops it
    failed,   // the watchdog reports `failure` and ends the process
    exiting,  // the process is being torn down: the watchdog stops, quietly
  };

  // `what` names the operation, its group and rank ("all_reduce on dp group [0, 2] (rank 0 of 2)").
  Watched(std::string what, double timeout_s, WatchdogFailure on_failure);
  virtual ~Watched() = default;
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

  // Called on the watchdog's thread only. On `failed`, sets `failure` to the line's message.
  virtual Status poll(std::string& failure) = 0;

  const std::string& what() const { return what_; }
  double timeout_s() const { return timeout_s_; }
  Clock::time_point deadline() const { return deadline_; }
  const WatchdogFailure& on_failure() const { return on_failure_; }

 private:
  std::string what_;
  double timeout_s_;
  Clock::time_point deadline_;
  WatchdogFailure on_failure_;
};

// The process's watchdog: started at first use, never destroyed (calls and
// operations may be in flight at exit).
class Watchdog {
 public:
  static Watchdog& instance();

  // Guards the blocking call that starts now: if it is still running `timeout_s`
  // seconds later, the process ends with "<what> timed out after <timeout_s> s".
  // One blocking call at a time (communicators are driven from one thread).
  void arm(std::string what, double timeout_s, WatchdogFailure on_failure = {});
  // The same for a collective in the flight recorder (`ticket`): named from its entry only if it times out,
  // noted half way to the deadline, and checked against its peers' notes at the deadline.
  void arm_call(std::uint64_t ticket, double timeout_s,
                std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  void disarm();

  // Watches `op` until its poll() reports it done.
  void track(std::shared_ptr<Watched> op);

  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  Watchdog();
  ~Watchdog() = default;
  struct State;
  [[noreturn]] static void fatal(const std::string& message, const WatchdogFailure& on_failure);
  void run();
  std::unique_ptr<State> state_;
};

// Arms the watchdog for the lifetime of the object (a blocking call's scope).
class ArmedCall {
 public:
  ArmedCall(std::string what, double timeout_s, WatchdogFailure on_failure = {}) {
    Watchdog::instance().arm(std::move(what), timeout_s, std::move(on_failure));
  }
  ~ArmedCall() { Watchdog::instance().disarm(); }
  ArmedCall(const ArmedCall&) = delete;
  ArmedCall& operator=(const ArmedCall&) = delete;
};

// How long a timed-out call waits for its peers' notes (flight::peers): half its timeout, at most 5 s.
double peer_wait_s(double timeout_s);

// The deadline `seconds` from now, clamped so that a "never" timeout cannot overflow the clock.
std::chrono::steady_clock::time_point watchdog_deadline_after(double seconds);

}  // namespace trident::dist
