#include "trident/core/parallel.h"

#include <cstdlib>
#include <string>
#include <thread>

#include "trident/core/error.h"

namespace trident {
namespace {

int env_int(const char* name, bool leading = false) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  // `leading`: Slurm writes task counts like "4(x2)" (4 tasks on each of 2 nodes).
  return (end && (leading || *end == '\0') && x > 0 && x < 1 << 20) ? static_cast<int>(x) : 0;
}

int g_threads = 0;  // 0 = not yet decided

}  // namespace

int local_rank_count() noexcept {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE",
                           "LOCAL_WORLD_SIZE"}) {
    if (int n = env_int(name)) return n;
  }
  // srun: tasks on this node (the first node's count when it differs across nodes).
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (int n = env_int(name, /*leading=*/true)) return n;
  }
  return 1;
}

int local_rank() noexcept {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                           "SLURM_LOCALID", "LOCAL_RANK"}) {
    const char* v = std::getenv(name);
    if (v && *v) {
      char* end = nullptr;
      const long x = std::strtol(v, &end, 10);
      if (end && *end == '\0' && x >= 0 && x < 1 << 20) return static_cast<int>(x);
    }
  }
  return 0;
}

int default_num_threads() noexcept {
  if (int n = env_int("TRIDENT_NUM_THREADS")) return n;
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores <= 0) cores = 1;
  return std::max(1, cores / local_rank_count());
}

int num_threads() noexcept {
  if (g_threads == 0) {
    g_threads = default_num_threads();
    omp_set_num_threads(g_threads);
  }
  return g_threads;
}

void set_num_threads(int n) {
  TRIDENT_CHECK(n >= 1, "set_num_threads: thread count must be at least 1, got {}", n);
  g_threads = n;
  omp_set_num_threads(n);
}

}  // namespace trident
