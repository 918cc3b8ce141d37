// MpiCommunicator: the Communicator of CPU tensors over MPI (any MPI-3 library; Open MPI and MPICH are tested).
//
// Non-blocking MPI operations polled with a deadline implement the timeout.
// f32/f64/i32/i64 reduce natively; bf16/f16 are widened to f32, reduced and
// rounded once. The world communicator initialises MPI (thread level
// FUNNELED: collectives are issued from the training thread).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "trident/dist/communicator.h"

namespace trident::dist {

// Initialises MPI if needed and returns the world communicator. `timeout_s` is
// the default deadline of every collective.
std::shared_ptr<Communicator> mpi_world(double timeout_s = 300.0);
// True when the process was started by an MPI launcher (mpirun, mpiexec.hydra, srun --mpi=pmix|pmi2).
bool launched_by_mpi();
// True for a task of an srun step of several tasks that srun started without an MPI plug-in (srun
// --mpi=none): each task would be a job of one rank.
bool srun_task_without_mpi();
// The job's world: mpi_world when a launcher started this process, else self_communicator; refused for a
// task of srun_task_without_mpi, naming the plug-in to use. (An srun plug-in that starts the process but
// not as the library's rank, e.g. pmix for MPICH, is refused by mpi_world.)
std::shared_ptr<Communicator> job_world(double timeout_s = 300.0);
// This process's rank as the launcher's environment gives it (before MPI starts); -1 without one.
int launcher_rank();
// Ends every rank of the job after a fatal error on this one (MPI_Abort); no-op without MPI.
[[noreturn]] void abort_job(int exit_code);

// How a rank that hit a fatal error (`message`) ends a multi-rank job. Ranks that fail meet on a
// communicator reserved for this (made when MPI starts) and wait up to `window_s` for each other:
//  - every rank failed (e.g. a config error all detect alike): `together`; when all messages are the
//    same only rank 0 prints (`print`), otherwise each rank prints its own with its rank (`name_rank`).
//    The ranks then end with finalize_and_exit: no MPI_Abort, so no launcher banner.
//  - some rank did not fail within the window: not `together`; this rank prints its message naming
//    its rank and brings the job down with abort_job (its peers may wait in a collective).
// Without MPI (one process, not started by a launcher) the answer is together/print. Under a
// launcher but before MPI started (an error in parsing the command line or the config), MPI is
// started here first, in a thread: when the other ranks never start it (a command without MPI)
// this rank reports alone after window_s + 10 s, and abort_job / finalize_and_exit then only exit.
struct FailureAgreement {
  bool together = true;
  bool print = true;
  bool name_rank = false;
};
FailureAgreement agree_on_failure(std::string_view message, double window_s = 10.0);
// The line to print (and the status to exit with) should the launcher end the job with SIGTERM while
// this rank waits in agree_on_failure (e.g. a peer that never starts MPI exited): installs a SIGTERM
// handler that writes `line` to stderr and exits.
void set_last_words(std::string_view line, int exit_code);
// Finalises MPI (if started) and exits the process with `exit_code`, after flushing stdio; a
// finalize that hangs is cut off after 30 s.
[[noreturn]] void finalize_and_exit(int exit_code);
// Finalises MPI at normal exit (idempotent).
void finalize();
// The MPI library's version line ("Open MPI v4.1.4, ..."); callable before MPI starts.
std::string mpi_library_version();

}  // namespace trident::dist
