// Checkpoints across layouts (docs/numerics.md#layout-equivalence), under mpirun with 8 ranks: a
// tiny GPT-2 (tied embeddings, dropout on) trained 20 steps under the seed's
// dp=2 × tp=2 × pp=2 with ZeRO-1 saves at step 10. Resumed from there
//   - under the same layout, steps 11–20 repeat the uninterrupted losses bit
//     for bit and end with bit-identical parameters;
//   - under tp=4 × dp=2, under dp=4 with ZeRO-3 (4 of the ranks) and on one
//     process, they follow them within 1e-5 (relative), parameters too —
// each rank reading only the boxes of the pieces its new layout needs
// (tensor-parallel columns and rows, pipeline stages, ZeRO rows, the tied
// copy of the embedding, AdamW moments).
#include <gtest/gtest.h>

#include "layout_runs.h"
#include "trident/dist/self_communicator.h"

namespace trident::train {
namespace {

namespace fs = std::filesystem;
using LayoutRun = testing::LayoutRuns::Run;

class ResumeUnderAnyLayout : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    runs_.set_up("resume");
    if (runs_.world->size() != 8) return;
    original_ = std::make_unique<LayoutRun>(runs_.run(runs_.world, "original", kSaved));
    step10_ = (runs_.shared / "original" / "checkpoints" / "step_00000010").string();
  }
  static void TearDownTestSuite() {
    original_.reset();
    runs_.tear_down();
  }
  void SetUp() override {
    if (runs_.world->size() != 8) GTEST_SKIP() << "an 8-rank test";
  }
  static std::vector<std::string> from_step10(std::vector<std::string> layout) {
    layout.push_back("checkpoint.resume=" + step10_);
    return layout;
  }

  static inline const std::vector<std::string> kSaved = {
      "dist.data_parallel_size=2", "dist.tensor_parallel_size=2", "dist.pipeline_parallel_size=2",
      "dist.zero_stage=1", "checkpoint.interval=10"};
  static inline testing::LayoutRuns runs_;
  static inline std::unique_ptr<LayoutRun> original_;
  static inline std::string step10_;
};

TEST_F(ResumeUnderAnyLayout, SameLayoutIsBitIdentical) {
  const LayoutRun resumed = runs_.run(runs_.world, "same", from_step10(kSaved));
  ASSERT_EQ(resumed.summary.losses.size(), 10u);
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(resumed.summary.losses[i], original_->summary.losses[10 + i]) << "step " << 11 + i;
  }
  EXPECT_EQ(resumed.params, original_->params);
}

TEST_F(ResumeUnderAnyLayout, TensorParallel4DataParallel2) {
  const LayoutRun resumed = runs_.run(runs_.world, "tp4dp2",
                                from_step10({"dist.tensor_parallel_size=4", "dist.data_parallel_size=2"}));
  testing::LayoutRuns::expect_follows(resumed, *original_, 10);
}

TEST_F(ResumeUnderAnyLayout, DataParallel4WithZero3) {
  // Ranks 0–3 form the new job; the others wait.
  auto half = runs_.world->split({{0, 1, 2, 3}, {4, 5, 6, 7}}, "half");
  if (runs_.world->rank() < 4) {
    const LayoutRun resumed = runs_.run(half, "dp4zero3", from_step10({"dist.zero_stage=3"}));
    testing::LayoutRuns::expect_follows(resumed, *original_, 10);
  }
  runs_.world->barrier();
}

TEST_F(ResumeUnderAnyLayout, OneProcess) {
  if (runs_.world->rank() == 0) {
    const LayoutRun resumed = runs_.run(dist::self_communicator(), "single", from_step10({}));
    testing::LayoutRuns::expect_follows(resumed, *original_, 10);
  }
  runs_.world->barrier();
}

}  // namespace
}  // namespace trident::train
