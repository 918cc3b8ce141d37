// Layout equivalence of data parallelism and ZeRO (docs/numerics.md#layout-equivalence), under mpirun:
// the same config trained on every rank as one process (the reference) and
// across the job with dp = world size and ZeRO stage 0–3 follows the same
// loss curve (relative 1e-5 per step over 20 steps, fp32, dropout on) and
// validation losses, and ends with the same parameters (relative 1e-5). With
// micro-batch 2 and a global batch of 8, dp = 2 runs 2 accumulation steps
// where the reference runs 4 (dp=2 × accumulation 2 = dp=1 × accumulation 4).
// Stages 1 and 3 run with data.eod_mask_loss: micro-batches then train
// different numbers of labels, and the loss is still the global-batch mean.
#include <gtest/gtest.h>

#include <memory>

#include "layout_runs.h"
#include "trident/dist/self_communicator.h"

namespace trident::train {
namespace {

class DataParallel : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() { runs_.set_up("dp"); }
  static void TearDownTestSuite() { runs_.tear_down(); }

  using Run = testing::LayoutRuns::Run;
  static Run run(std::shared_ptr<dist::Communicator> comm, const std::string& name, int zero_stage, bool eod_mask) {
    return runs_.run(std::move(comm), name,
                     {fmt::format("dist.zero_stage={}", zero_stage), fmt::format("data.eod_mask_loss={}", eod_mask)});
  }
  static const Run& reference(bool eod_mask) {
    auto& slot = references_[eod_mask];
    if (!slot)
      slot = std::make_unique<Run>(run(dist::self_communicator(), fmt::format("reference{}", eod_mask), 0, eod_mask));
    return *slot;
  }

  static inline testing::LayoutRuns runs_;
  static inline std::unique_ptr<Run> references_[2];
};

TEST_P(DataParallel, FollowsTheSingleProcessRun) {
  const int stage = GetParam();
  const bool eod_mask = stage % 2 == 1;
  const Run got = run(runs_.world, fmt::format("dp{}-zero{}", runs_.world->size(), stage), stage, eod_mask);
  ASSERT_EQ(got.summary.losses.size(), 20u);
  testing::LayoutRuns::expect_follows(got, reference(eod_mask));
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, DataParallel, ::testing::Values(0, 1, 2, 3),
                         [](const auto& p) { return fmt::format("zero{}", p.param); });

}  // namespace
}  // namespace trident::train
