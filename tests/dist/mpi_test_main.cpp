// main() for tests that run under mpirun: initialises MPI, lets only rank 0
// print GoogleTest's report (every rank still runs and checks every test),
// and returns failure if any rank failed. TRIDENT_TEST_ALL_RANKS=1 lets every
// rank print (to find which rank a failure is on).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "trident/dist/mpi_communicator.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world = trident::dist::mpi_world(60.0);
  const char* all_ranks = std::getenv("TRIDENT_TEST_ALL_RANKS");
  if (world->rank() != 0 && !(all_ranks && std::string(all_ranks) == "1")) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  const double any_failed = world->all_reduce_scalar(failed, trident::dist::ReduceOp::max);
  world.reset();
  trident::dist::finalize();
  return any_failed > 0 ? 1 : 0;
}
