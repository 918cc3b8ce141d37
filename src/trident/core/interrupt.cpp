#include "trident/core/interrupt.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "trident/core/error.h"

namespace trident {

namespace {

std::atomic<bool> g_requested{false};
std::atomic<int> g_scopes{0};
static_assert(std::atomic<bool>::is_always_lock_free, "request_interrupt() runs in a signal handler");

constexpr std::array<std::string_view, 5> kWaitNames = {"index_cache", "token_scan", "model_init", "checkpoint_load",
                                                        "checkpoint_write"};

// TRIDENT_TEST_SLOW_WAIT, read once: the wait it slows and by how long.
struct SlowWait {
  int wait = -1;
  std::chrono::milliseconds delay{0};
};

SlowWait slow_wait_of_environment() {
  const char* spec = std::getenv("TRIDENT_TEST_SLOW_WAIT");
  if (spec == nullptr || *spec == '\0') return {};
  const std::string_view s(spec);
  const auto colon = s.find(':');
  SlowWait out;
  for (std::size_t i = 0; colon != std::string_view::npos && i < kWaitNames.size(); ++i)
    if (s.substr(0, colon) == kWaitNames[i]) out.wait = static_cast<int>(i);
  char* end = nullptr;
  const std::string ms(colon == std::string_view::npos ? std::string_view() : s.substr(colon + 1));
  const long long value = std::strtoll(ms.c_str(), &end, 10);
  TRIDENT_CHECK(out.wait >= 0 && !ms.empty() && *end == '\0' && value >= 0,
                "TRIDENT_TEST_SLOW_WAIT='{}': expected WAIT:MILLISECONDS, WAIT one of index_cache, token_scan, "
                "model_init, checkpoint_load, checkpoint_write",
                s);
  out.delay = std::chrono::milliseconds(value);
  return out;
}

const SlowWait& slow_wait() {
  static const SlowWait slow = slow_wait_of_environment();
  return slow;
}

// Whether this is the first point of `wait` that the hook slows (each wait is slowed once per process).
bool slowed_now(LongWait wait, std::chrono::milliseconds& delay) {
  const SlowWait& slow = slow_wait();
  static std::atomic<bool> used{false};
  if (slow.wait != static_cast<int>(wait) || used.exchange(true)) return false;
  delay = slow.delay;
  // The line the tests wait for: from here on the run is inside the wait.
  std::fprintf(stderr, "trident: TRIDENT_TEST_SLOW_WAIT: %s, %lld ms more\n", long_wait_doing(wait),
               static_cast<long long>(delay.count()));
  std::fflush(stderr);
  return true;
}

bool live_request() noexcept {
  return g_scopes.load(std::memory_order_relaxed) > 0 && g_requested.load(std::memory_order_relaxed);
}

}  // namespace

const char* long_wait_doing(LongWait wait) noexcept {
  switch (wait) {
    case LongWait::index_cache: return "building the dataset's index cache";
    case LongWait::token_scan: return "scanning the dataset's token ids";
    case LongWait::model_init: return "initialising the model's weights";
    case LongWait::checkpoint_load: return "loading the checkpoint to resume from";
    case LongWait::checkpoint_write: return "writing a checkpoint";
  }
  return "a long wait";
}

Interrupted::Interrupted(LongWait wait)
    : wait_(wait), what_(std::string("stopped by signal while ") + long_wait_doing(wait)) {}

void request_interrupt() noexcept { g_requested.store(true); }
void clear_interrupt() noexcept { g_requested.store(false); }
bool interrupt_requested() noexcept { return g_requested.load(); }

InterruptionScope::InterruptionScope() {
  (void)slow_wait();  // a malformed test hook is refused here, at the start, not inside a wait
  g_scopes.fetch_add(1);
}
InterruptionScope::~InterruptionScope() { g_scopes.fetch_sub(1); }

void interruption_point(LongWait wait) {
  std::chrono::milliseconds delay{0};
  if (slowed_now(wait, delay)) {
    const auto until = std::chrono::steady_clock::now() + delay;
    while (!live_request() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (live_request()) throw Interrupted(wait);
}

void test_slow_wait(LongWait wait) {
  std::chrono::milliseconds delay{0};
  if (slowed_now(wait, delay)) std::this_thread::sleep_for(delay);
}

}  // namespace trident
