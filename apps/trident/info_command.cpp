// trident info: what this build contains and what it will use on this machine.
#include <fmt/format.h>

#include <thread>

#include "commands.h"
#include "trident/core/backend.h"
#include "trident/core/parallel.h"
#include "trident/core/version.h"
#include "trident/data/parquet_reader.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/kernels/cpu/matmul.h"
#ifdef TRIDENT_HAVE_CUDA
#include "trident/kernels/cuda/device.h"
#endif
#ifdef TRIDENT_HAVE_NCCL
#include "trident/dist/nccl_communicator.h"
#endif

namespace trident::cli {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print version, build configuration and backends");
  cmd->callback([] {
    fmt::print("trident {}\n", kVersion);
    fmt::print("build type:      {}\n", kBuildType);
    fmt::print("compiler:        {}\n", kCompiler);
    fmt::print("cpu threads:     {} (of {} hardware threads, {} rank(s) on this node)\n", num_threads(),
               std::thread::hardware_concurrency(), local_rank_count());
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
    fmt::print("mpi:             built ({})\n", dist::mpi_library_version());
    fmt::print("parquet input:   {}\n", data::parquet_build_description());
  });
}

}  // namespace trident::cli
