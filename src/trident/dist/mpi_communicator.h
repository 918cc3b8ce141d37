// MpiCommunicator: the Communicator of CPU tensors over MPI (Open MPI).
//
// Non-blocking MPI operations polled with a deadline implement the timeout.
// f32/f64/i32/i64 reduce natively; bf16/f16 are widened to f32, reduced and
// rounded once. The world communicator initialises MPI (thread level
// FUNNELED: collectives are issued from the training thread).
#pragma once

#include <memory>

#include "trident/dist/communicator.h"

namespace trident::dist {

// Initialises MPI if needed and returns the world communicator. `timeout_s` is
// the default deadline of every collective.
std::shared_ptr<Communicator> mpi_world(double timeout_s = 300.0);
// True when the process was started by an MPI launcher (mpirun, srun --mpi=pmix).
bool launched_by_mpi();
// Ends every rank of the job after a fatal error on this one (MPI_Abort); no-op without MPI.
[[noreturn]] void abort_job(int exit_code);
// Finalises MPI at normal exit (idempotent).
void finalize();
// The MPI library's version line ("Open MPI v4.1.4, ..."); callable before MPI starts.
std::string mpi_library_version();

}  // namespace trident::dist
