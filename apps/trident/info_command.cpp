// trident info: what this build contains and what it will use on this machine; under mpirun or
// srun, also which rank this is and where it runs (`trident launch -n 4 -- trident info`,
// `srun --mpi=pmix -N2 -n4 trident info`: one block per rank).
#include <fmt/format.h>

#include <cstdlib>
#include <thread>

#include "commands.h"
#include "trident/core/backend.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/core/version.h"
#include "trident/data/dataset/parquet_reader.h"
#include "trident/dist/launcher.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/kernels/cpu/matmul.h"
#ifdef TRIDENT_HAVE_CUDA
#include "trident/kernels/cuda/device.h"
#endif
#ifdef TRIDENT_HAVE_NCCL
#include "trident/dist/nccl_communicator.h"
#endif

namespace trident::cli {

namespace {

// "2 of 4 on host node2, local rank 0 of 2": the MPI job's own rank and size (so 4 separate
// one-rank jobs, e.g. srun without the MPI plug-in, do not pass for one job), this host's name and
// the rank's index among the ranks on this host (the GPU it takes with train.device=cuda).
std::string rank_description() {
  if (dist::launched_by_mpi()) {
    const auto world = dist::mpi_world();
    return fmt::format("{} of {} on host {}, local rank {} of {}", world->rank(), world->size(), host_name(),
                       local_rank(), local_rank_count());
  }
  if (const char* task = std::getenv("SLURM_PROCID"); task != nullptr && *task != '\0') {
    const char* tasks = std::getenv("SLURM_NTASKS");
    return fmt::format("none: Slurm task {} of {} on host {} without MPI (srun --mpi={} makes the tasks one job)",
                       task, tasks != nullptr ? tasks : "?", host_name(),
                       dist::Launcher(dist::mpi_family_of(dist::mpi_library_version())).srun_plugin());
  }
  return fmt::format("0 of 1 on host {} (not started by mpirun or srun)", host_name());
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print version, build configuration and backends");
  cmd->callback([] {
    fmt::print("trident {}\n", kVersion);
    fmt::print("build type:      {}\n", kBuildType);
    fmt::print("compiler:        {}\n", kCompiler);
    fmt::print("cpu threads:     {} (of {} hardware threads, {} rank(s) on this node)\n", num_threads(),
               std::thread::hardware_concurrency(), local_rank_count());
    fmt::print("rank:            {}\n", rank_description());
#ifdef TRIDENT_HAVE_CUDA
    kernels::cuda::initialize();
    fmt::print("cuda:            built; {}\n", kernels::cuda::describe());
#else
    fmt::print("cuda:            not built (no nvcc when configured)\n");
#endif
#ifdef TRIDENT_HAVE_NCCL
    fmt::print("nccl:            built ({}; multi-GPU training)\n", dist::nccl_library_version());
#else
    fmt::print("nccl:            not built (no CUDA backend, or no NCCL when configured)\n");
#endif
    fmt::print("matmul backend:  {}\n", kernels::cpu::matmul_backend_description());
    const std::string mpi = dist::mpi_library_version();
    const dist::Launcher launcher(dist::mpi_family_of(mpi));
    fmt::print("mpi:             built ({}; trident launch runs {}, srun needs --mpi={})\n", mpi,
               launcher.programs().front(), launcher.srun_plugin());
    fmt::print("parquet input:   {}\n", data::parquet_build_description());
  });
}

}  // namespace trident::cli
