// A stop asked for while a long wait runs (SIGINT/SIGTERM during training; docs/guide/checkpoints.md,
// "Signals and long waits").
//
// The training's signal handler (train/stop_policy.cpp) sets one process-wide flag here. Between steps and
// between the batches of an evaluation the trainer acts on it itself; the long loops below the trainer — the
// dataset's index build, the scan of a dataset's token ids, the model's initialisation, a resume's load —
// call interruption_point(), which gives up with Interrupted once a stop is requested, before anything is
// written, so that the run leaves within seconds and leaves no half-built file. Interruption points are live
// only while an InterruptionScope is (the training's StopSignals holds one): elsewhere, as when a library
// caller builds a dataset, they never throw.
#pragma once

#include <exception>
#include <string>

namespace trident {

// The long waits that have interruption points (or, for a checkpoint's write, only the test delay).
enum class LongWait { index_cache, token_scan, model_init, checkpoint_load, checkpoint_write };

// What the wait is doing, for the line a stop prints: "building the dataset's index cache".
const char* long_wait_doing(LongWait wait) noexcept;

// Thrown at an interruption point once a stop is requested. Not a trident::Error, so that code which turns
// an error into another (naming its dataset, say) lets it pass unchanged.
class Interrupted : public std::exception {
 public:
  explicit Interrupted(LongWait wait);
  LongWait wait() const noexcept { return wait_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  LongWait wait_;
  std::string what_;
};

// The flag. request_interrupt() is async-signal-safe (one lock-free atomic store).
void request_interrupt() noexcept;
void clear_interrupt() noexcept;
bool interrupt_requested() noexcept;

// While one lives, interruption points throw once a stop is requested. They nest. Made with a malformed
// TRIDENT_TEST_SLOW_WAIT (below), it throws trident::Error naming it.
class InterruptionScope {
 public:
  InterruptionScope();
  ~InterruptionScope();
  InterruptionScope(const InterruptionScope&) = delete;
  InterruptionScope& operator=(const InterruptionScope&) = delete;
};

// A point in the long wait `wait` where a requested stop is acted on: throws Interrupted inside an
// InterruptionScope once a stop is requested. Cheap (two atomic loads): call it every few milliseconds
// of work, not per element.
//
// Test hook: TRIDENT_TEST_SLOW_WAIT="WAIT:MS" (WAIT: index_cache, token_scan, model_init, checkpoint_load)
// makes the first interruption point of that wait in the process take MS milliseconds more, ending early
// (and throwing) when a stop is requested, so that a test can signal a run while it is inside the wait.
void interruption_point(LongWait wait);

// The same test delay for a wait that is not interrupted (WAIT checkpoint_write: a checkpoint's write
// finishes whole and the run stops after it): sleeps the whole MS the first time, signal or not.
void test_slow_wait(LongWait wait);

}  // namespace trident
