// The clocks the benchmarks time with.
#pragma once

#include <time.h>

#include <chrono>

namespace trident::bench {

// Seconds of steady wall time since an arbitrary start.
inline double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds of CPU time this process (all its threads) has used.
inline double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace trident::bench
