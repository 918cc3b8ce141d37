#include "trident/train/stop_policy.h"

#include <csignal>

#include "trident/core/interrupt.h"
#include "trident/train/trainer.h"

namespace trident::train {

namespace {

// The flag is core's (core/interrupt.h): the long waits below the trainer read it at their interruption points.
extern "C" void on_stop_signal(int sig) {
  request_interrupt();
  std::signal(sig, SIG_DFL);
}

}  // namespace

void request_stop() noexcept {
  request_interrupt();
}

namespace detail {

StopReason stop_reason(bool requested, double minutes, double limit_minutes, bool early_stop, bool program_stop) {
  if (early_stop) return StopReason::early_stopping;
  if (limit_minutes > 0 && minutes >= limit_minutes) return StopReason::time_limit;
  if (requested) return StopReason::signal;
  return program_stop ? StopReason::requested : StopReason::none;
}

StopReason agree_stop(dist::Communicator& world, StopReason mine) {
  const double why = world.all_reduce_scalar(static_cast<double>(mine), dist::ReduceOp::max);
  return why > 3   ? StopReason::early_stopping
         : why > 2 ? StopReason::time_limit
         : why > 1 ? StopReason::signal
         : why > 0 ? StopReason::requested
                   : StopReason::none;
}

bool stop_requested() noexcept {
  return interrupt_requested();
}

StopSignals::StopSignals() {
  clear_interrupt();
  int_ = std::signal(SIGINT, on_stop_signal);
  term_ = std::signal(SIGTERM, on_stop_signal);
}

StopSignals::~StopSignals() {
  std::signal(SIGINT, int_);
  std::signal(SIGTERM, term_);
}

StopPolicy::StopPolicy(dist::Communicator& world, std::int64_t steps, double limit_minutes, Clock::time_point job_start)
    : world_(world), steps_(steps), limit_minutes_(limit_minutes), job_start_(job_start) {
  own_signals_.emplace();
}

StopPolicy::StopPolicy(dist::Communicator& world, std::int64_t steps, double limit_minutes, Clock::time_point job_start,
                       const StopSignals&)
    : world_(world), steps_(steps), limit_minutes_(limit_minutes), job_start_(job_start) {}

bool StopPolicy::signalled() {
  return world_.all_reduce_scalar(stop_requested() ? 1.0 : 0.0, dist::ReduceOp::max) > 0;
}

StopReason StopPolicy::after_step(bool early_stop, bool program_stop) {
  const double minutes = std::chrono::duration<double>(Clock::now() - job_start_).count() / 60;
  return agree_stop(world_, stop_reason(stop_requested(), minutes, limit_minutes_, early_stop, program_stop));
}

}  // namespace detail
}  // namespace trident::train
