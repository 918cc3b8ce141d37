// dist::Launcher: the command lines, hostfiles and signals of Open MPI's mpirun and Hydra's mpiexec.
#include "trident/dist/launcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>

#include "trident/core/error.h"

namespace trident::dist {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(MpiFamily, FromTheLibraryVersionLine) {
  EXPECT_EQ(mpi_family_of("Open MPI v4.1.4, package: Debian OpenMPI"), MpiFamily::open_mpi);
  EXPECT_EQ(mpi_family_of("MPICH Version: 4.0.2"), MpiFamily::mpich);
  EXPECT_EQ(mpi_family_of("Intel(R) MPI Library 2021.10 for Linux* OS"), MpiFamily::mpich);
  EXPECT_EQ(mpi_family_of("MVAPICH2 Version : 2.3.7"), MpiFamily::mpich);
  EXPECT_STREQ(family_name(MpiFamily::open_mpi), "Open MPI");
  EXPECT_STREQ(family_name(MpiFamily::mpich), "MPICH");
}

TEST(Hostfile, EitherFormatReadsTheSameHosts) {
  bool native = false;
  const auto open_mpi = parse_hostfile("# cluster\nnode1 slots=2  # first\n\n  node2 slots=3\nnode3\n", "h", MpiFamily::mpich,
                                       native);
  EXPECT_FALSE(native);  // Open MPI's lines, for Hydra
  ASSERT_EQ(open_mpi.size(), 3u);
  EXPECT_EQ(open_mpi[0].host, "node1");
  EXPECT_EQ(open_mpi[0].slots, 2);
  EXPECT_EQ(open_mpi[1].host, "node2");
  EXPECT_EQ(open_mpi[1].slots, 3);
  EXPECT_EQ(open_mpi[2].host, "node3");
  EXPECT_EQ(open_mpi[2].slots, 0);
  EXPECT_EQ(format_hostfile(open_mpi, MpiFamily::mpich), "node1:2\nnode2:3\nnode3\n");

  const auto hydra = parse_hostfile("node1:2\nnode2:3\nnode3\n", "h", MpiFamily::open_mpi, native);
  EXPECT_FALSE(native);
  EXPECT_EQ(format_hostfile(hydra, MpiFamily::open_mpi), "node1 slots=2\nnode2 slots=3\nnode3\n");
}

TEST(Hostfile, ALauncherOwnFormatGoesUnchanged) {
  bool native = false;
  parse_hostfile("node1 slots=2 max_slots=4\nnode2\n", "h", MpiFamily::open_mpi, native);
  EXPECT_TRUE(native);
  parse_hostfile("node1:2\nnode2\n", "h", MpiFamily::mpich, native);
  EXPECT_TRUE(native);
  parse_hostfile("node1\nnode2\n", "h", MpiFamily::mpich, native);  // bare hosts are both families'
  EXPECT_TRUE(native);
}

void expect_refused(std::string_view text, MpiFamily family, const std::string& message) {
  bool native = false;
  try {
    parse_hostfile(text, "hosts.txt", family, native);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'hosts.txt'"));
    EXPECT_THAT(e.what(), HasSubstr(message));
  }
}

TEST(Hostfile, BadLinesAreRefusedByFileAndLine) {
  expect_refused("node1 slots=0\n", MpiFamily::open_mpi, "line 1: 'slots=0' is not a slot count");
  expect_refused("node1\nnode2:x\n", MpiFamily::mpich, "line 2: 'node2:x' is not a slot count");
  expect_refused("node1:-1\n", MpiFamily::mpich, "is not a slot count");
  expect_refused("node1 slots=2 max_slots=4\n", MpiFamily::mpich, "line 1: 'max_slots=4' is Open MPI's");
  expect_refused("node1:2 binding=core\n", MpiFamily::open_mpi, "line 1: 'node1:2 binding=core' has Hydra's options");
  expect_refused(":2\n", MpiFamily::mpich, "line 1: no host name");
  expect_refused("# only a comment\n\n", MpiFamily::open_mpi, "names no hosts (one host a line, e.g. 'node1 slots=2')");
  expect_refused("", MpiFamily::mpich, "e.g. 'node1:2'");
}

LaunchPlan plan() {
  LaunchPlan p;
  p.ranks = 4;
  p.set_env = {"TRIDENT_LAUNCH_SIGNALS=1", "TRIDENT_STDOUT_IS_TTY=0"};
  p.pass_env = {"TRIDENT_NUM_THREADS"};
  p.command = {"trident", "train", "cfg.toml"};
  return p;
}

TEST(Launcher, OpenMpiCommandLine) {
  const Launcher l(MpiFamily::open_mpi);
  LaunchPlan p = plan();
  EXPECT_THAT(l.command_line("mpirun", p),
              ElementsAre("mpirun", "-np", "4", "--bind-to", "none", "-x", "OMPI_MCA_mpi_yield_when_idle=1", "-x",
                          "TRIDENT_LAUNCH_SIGNALS=1", "-x", "TRIDENT_STDOUT_IS_TTY=0", "-x", "TRIDENT_NUM_THREADS",
                          "trident", "train", "cfg.toml"));
  p.oversubscribe = p.as_root = true;
  p.hostfile = "hosts";
  p.set_env.clear();
  p.pass_env.clear();
  EXPECT_THAT(l.command_line("/usr/bin/mpirun", p),
              ElementsAre("/usr/bin/mpirun", "-np", "4", "--bind-to", "none", "-x", "OMPI_MCA_mpi_yield_when_idle=1",
                          "--oversubscribe", "--hostfile", "hosts", "--allow-run-as-root", "trident", "train",
                          "cfg.toml"));
}

TEST(Launcher, HydraCommandLine) {
  const Launcher l(MpiFamily::mpich);
  LaunchPlan p = plan();
  p.oversubscribe = p.as_root = true;  // Hydra's defaults: nothing to add
  p.hostfile = "hosts";
  // The whole environment reaches every rank (-genvall is Hydra's default), so pass_env adds nothing.
  EXPECT_THAT(l.command_line("mpiexec.hydra", p),
              ElementsAre("mpiexec.hydra", "-n", "4", "-f", "hosts", "-genv", "TRIDENT_LAUNCH_SIGNALS", "1", "-genv",
                          "TRIDENT_STDOUT_IS_TTY", "0", "trident", "train", "cfg.toml"));
}

TEST(Launcher, SignalsAndPrograms) {
  const Launcher open_mpi(MpiFamily::open_mpi), hydra(MpiFamily::mpich);
  // A stop request: SIGUSR1 for SIGINT with both; SIGTERM as SIGUSR2 through mpirun (which would end the
  // job on SIGTERM), as itself through Hydra (which does not forward SIGUSR2).
  EXPECT_EQ(open_mpi.stop_signal(SIGINT), SIGUSR1);
  EXPECT_EQ(open_mpi.stop_signal(SIGTERM), SIGUSR2);
  EXPECT_EQ(hydra.stop_signal(SIGINT), SIGUSR1);
  EXPECT_EQ(hydra.stop_signal(SIGTERM), SIGTERM);
  EXPECT_EQ(open_mpi.end_signal(), SIGTERM);
  EXPECT_EQ(open_mpi.end_signal_count(), 1);
  EXPECT_EQ(hydra.end_signal(), SIGINT);
  EXPECT_EQ(hydra.end_signal_count(), 2);
  EXPECT_TRUE(open_mpi.forwards_suspend());
  EXPECT_FALSE(hydra.forwards_suspend());
  EXPECT_EQ(open_mpi.programs().front(), "mpirun");
  EXPECT_EQ(hydra.programs().front(), "mpiexec.hydra");
  EXPECT_STREQ(open_mpi.srun_plugin(), "pmix");
  EXPECT_STREQ(hydra.srun_plugin(), "pmi2");
  EXPECT_STREQ(open_mpi.package(), "openmpi-bin");
  EXPECT_STREQ(hydra.package(), "mpich");
}

}  // namespace
}  // namespace trident::dist
