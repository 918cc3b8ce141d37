// How `trident launch` starts ranks through the launcher of the MPI library trident is linked with.
//
// The two launcher families differ in their flags, their hostfiles and how they pass signals on:
//  - Open MPI's mpirun: `-np N`, `-x NAME[=VALUE]` per variable, `--hostfile` with lines
//    `node1 slots=2`; it refuses to run as root or to oversubscribe the cores unless told to, and
//    ends the job on SIGINT/SIGTERM but forwards SIGUSR1/SIGUSR2 and SIGTSTP/SIGCONT to the ranks;
//  - Hydra's mpiexec (MPICH, and the libraries derived from it: Intel MPI, MVAPICH): `-n N`,
//    `-genv NAME VALUE`, and it passes launch's whole environment by default; `-f` with lines
//    `node1:2`; it forwards SIGINT (a second one ends the job), SIGTERM and SIGUSR1 to the ranks,
//    but not SIGUSR2 (it exits) nor SIGTSTP.
// A LaunchPlan says what to run; Launcher turns it into the launcher's command line. Which launcher
// program to run (mpirun, mpiexec.hydra, ...) is decided by the caller, which checks its --version
// against version_markers(): on a machine with both libraries `mpirun` is the default one's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trident::dist {

enum class MpiFamily { open_mpi, mpich };

// The family of an MPI library from its MPI_Get_library_version line ("Open MPI v4.1.4, ...",
// "MPICH Version: 4.0.2", "Intel(R) MPI Library ..."): Open MPI, else MPICH's.
MpiFamily mpi_family_of(std::string_view library_version);
// "Open MPI" / "MPICH".
const char* family_name(MpiFamily family);

// One host of a hostfile and its slots (0: not given, the launcher's default).
struct HostSlots {
  std::string host;
  int slots = 0;
};

// Reads a hostfile in either family's format, line by line: `host`, `host slots=N` (Open MPI) or
// `host:N` (Hydra); `#` starts a comment. `path` names the file in errors, which also name the line
// and what was expected. `native` is set to whether every line is already `family`'s format, so the
// file can go to the launcher unchanged (with options trident does not know, e.g. Open MPI's
// max_slots); a file in the other family's format must hold only hosts and slots.
std::vector<HostSlots> parse_hostfile(std::string_view text, const std::string& path, MpiFamily family, bool& native);
// `hosts` as `family`'s hostfile, one host a line.
std::string format_hostfile(const std::vector<HostSlots>& hosts, MpiFamily family);

struct LaunchPlan {
  int ranks = 1;
  std::string hostfile;                   // in the launcher's format; empty: this host only
  bool oversubscribe = false;             // more ranks than this host's cores
  bool as_root = false;                   // launch runs as root
  std::vector<std::string> set_env;       // NAME=VALUE, for every rank
  std::vector<std::string> pass_env;      // NAMES of launch's environment every rank gets (other hosts too)
  std::vector<std::string> command;       // the program and its arguments
};

class Launcher {
 public:
  explicit Launcher(MpiFamily family) : family_(family) {}
  MpiFamily family() const { return family_; }
  // Program names to try, in order, and what each one's `--version` must print to be this family's.
  std::vector<std::string> programs() const;
  std::vector<std::string> version_markers() const;
  // The Debian package that provides the launcher (for the error when none is found).
  const char* package() const;
  // srun's --mpi plugin that starts ranks of this family's library: pmix (Open MPI), pmi2 (MPICH's PMI).
  const char* srun_plugin() const { return family_ == MpiFamily::open_mpi ? "pmix" : "pmi2"; }
  // `program` and its arguments for `plan`.
  std::vector<std::string> command_line(const std::string& program, const LaunchPlan& plan) const;
  // The signal to send the launcher so that every rank gets the user's `signal` (SIGINT or SIGTERM)
  // as a request to stop; the ranks are told (TRIDENT_LAUNCH_SIGNALS=1) that SIGUSR1 / SIGUSR2 mean SIGINT /
  // SIGTERM. mpirun would end the job on either; Hydra forwards SIGTERM but not SIGUSR2.
  int stop_signal(int signal) const;
  // The signal that makes the launcher end the job (kill the ranks) once a stop was requested, and how
  // many times to send it: mpirun ends the job on SIGTERM; Hydra forwards a first SIGINT to the ranks
  // and ends the job on the second.
  int end_signal() const;
  int end_signal_count() const { return family_ == MpiFamily::open_mpi ? 1 : 2; }
  // Whether the launcher passes SIGTSTP / SIGCONT on to the ranks (Hydra's does not: launch then
  // signals the process group the launcher and this host's ranks share).
  bool forwards_suspend() const { return family_ == MpiFamily::open_mpi; }
  // Whether this host's ranks run in the launcher's process group (mpirun's do; Hydra's proxy starts
  // each in a session of its own), so that killing the group kills them.
  bool ranks_in_launcher_group() const { return family_ == MpiFamily::open_mpi; }

 private:
  MpiFamily family_;
};

}  // namespace trident::dist
