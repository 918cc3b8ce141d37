// Intra-rank parallelism: the thread pool every CPU kernel shares (OpenMP).
//
// A rank uses cores / ranks_on_this_node threads by default (at least 1), so
// eight ranks oversubscribed on two cores do not thrash; TRIDENT_NUM_THREADS
// or set_num_threads() override it. oneDNN and OpenBLAS are told the same.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace trident {

int num_threads() noexcept;
void set_num_threads(int n);
// cores / local ranks (from the launcher's environment), at least 1.
int default_num_threads() noexcept;
// Ranks on this node as reported by mpirun/srun (1 when not launched).
int local_rank_count() noexcept;
// This process's index among the ranks on its node (mpirun/srun; 0 when not launched).
int local_rank() noexcept;

// Runs f(chunk_begin, chunk_end) over [begin, end) split into at most
// num_threads() chunks of at least `grain` elements each. Serial when the range
// is small, when one thread is configured, or when already inside a parallel region.
template <typename F>
void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain, F&& f) {
  const std::int64_t n = end - begin;
  if (n <= 0) return;
  const int threads = num_threads();
  std::int64_t chunks = std::min<std::int64_t>(threads, (n + std::max<std::int64_t>(grain, 1) - 1) / std::max<std::int64_t>(grain, 1));
  if (chunks <= 1 || omp_in_parallel()) {
    f(begin, end);
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    const std::int64_t t = omp_get_thread_num();
    const std::int64_t nt = omp_get_num_threads();
    const std::int64_t lo = begin + n * t / nt;
    const std::int64_t hi = begin + n * (t + 1) / nt;
    if (lo < hi) f(lo, hi);
  }
}

}  // namespace trident
