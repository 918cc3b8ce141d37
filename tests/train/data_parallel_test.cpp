// Layout equivalence of data parallelism and ZeRO (DESIGN.md §1), under mpirun:
// the same config trained on every rank as one process (the reference) and
// across the job with dp = world size and ZeRO stage 0–3 follows the same
// loss curve (relative 1e-5 per step over 20 steps, fp32, dropout on) and
// ends with the same parameters (relative 1e-5). With micro-batch 2 and a
// global batch of 8, dp = 2 runs 2 accumulation steps where the reference runs
// 4 (dp=2 × accumulation 2 = dp=1 × accumulation 4).
#include <gtest/gtest.h>

#include "layout_runs.h"
#include "trident/dist/self_communicator.h"

namespace trident::train {
namespace {

class DataParallel : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {
    runs_.set_up("dp");
    reference_ = run(dist::self_communicator(), "reference", 0);
  }
  static void TearDownTestSuite() { runs_.tear_down(); }

  using Run = testing::LayoutRuns::Run;
  static Run run(std::shared_ptr<dist::Communicator> comm, const std::string& name, int zero_stage) {
    return runs_.run(std::move(comm), name, {fmt::format("dist.zero_stage={}", zero_stage)});
  }

  static inline testing::LayoutRuns runs_;
  static inline Run reference_;
};

TEST_P(DataParallel, FollowsTheSingleProcessRun) {
  const int stage = GetParam();
  const Run got = run(runs_.world, fmt::format("dp{}-zero{}", runs_.world->size(), stage), stage);
  ASSERT_EQ(got.summary.losses.size(), 20u);
  testing::LayoutRuns::expect_follows(got, reference_);
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, DataParallel, ::testing::Values(0, 1, 2, 3),
                         [](const auto& p) { return fmt::format("zero{}", p.param); });

}  // namespace
}  // namespace trident::train
