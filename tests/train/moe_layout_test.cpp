// Layout equivalence of mixture-of-experts training (docs/numerics.md#layout-equivalence), under mpirun
// with 2, 4 and 8 ranks: a tiny Mixtral (4 experts, 2 per token, the load-balancing and z losses on; and a
// Qwen2-MoE with its shared expert) trained as one process (the reference, on every rank) and across the
// job follows the same loss curve (relative 1e-5 per step over 20 steps, fp32) and validation losses,
// and ends with the same parameters, under
//   data parallelism: dp=2, dp=2 with ZeRO-1, dp=4 with ZeRO-3 (blocks recomputed: the aux loss leaves
//     each unit as an output) and dp=2 with activation checkpointing;
//   expert parallelism (dist.expert_parallel_size, carved out of the data-parallel ranks): ep2, ep4,
//     ep2 × dp2 (with ZeRO-1: experts partitioned over their own replicas), ep2 × tp2, ep2 × pp2 (the
//     aux loss leaves each stage beside its activation) and dp2 × ep2 × tp2 on 8 ranks;
//   capacity dispatch (factor 1, tokens dropped) under dp=2, ep2 and ep2 × dp2, whose drops depend only
//     on the micro-batch, never on which rank holds which expert.
// Each micro-batch's aux loss counts by its share of the global batch's tokens, and a data-parallel
// rank's micro-batches are the single process's.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "layout_runs.h"
#include "testing/layout_case.h"
#include "trident/dist/self_communicator.h"

namespace trident::train {
namespace {

using Layout = testing::LayoutCase;

// A case under data parallelism (a ZeRO stage, activation checkpointing, capacity dispatch).
Layout data_parallel(int dp, int zero = 0, bool checkpointing = false, double capacity = 0,
                     std::string arch = "mixtral") {
  return Layout{.arch = std::move(arch), .dp = dp, .zero = zero, .checkpointing = checkpointing, .capacity = capacity};
}

// A Mixtral case with its experts split over `ep` of the `dp` data-parallel ranks.
Layout expert_parallel(int dp, int ep, int tp = 1, int pp = 1, int zero = 0, double capacity = 0) {
  return Layout{.arch = "mixtral", .dp = dp, .tp = tp, .pp = pp, .ep = ep, .zero = zero, .capacity = capacity};
}

class MoELayouts : public ::testing::TestWithParam<Layout> {
 protected:
  static void SetUpTestSuite() { runs_.set_up("moe"); }
  static void TearDownTestSuite() { runs_.tear_down(); }

  using Run = testing::LayoutRuns::Run;
  static std::vector<std::string> model(const Layout& l) {
    std::vector<std::string> m = {"model.arch=" + l.arch, "model.n_kv_head=2", "model.d_ff=32", "model.n_experts=4",
                                  "model.experts_per_token=2", "model.moe_aux_loss_coef=0.05",
                                  "model.moe_z_loss_coef=0.01", fmt::format("model.moe_capacity_factor={}", l.capacity)};
    if (l.arch == "qwen2_moe") {  // narrower experts and a gated shared expert
      m.emplace_back("model.moe_d_ff=16");
      m.emplace_back("model.moe_shared_d_ff=24");
    }
    return m;
  }
  static Run run(std::shared_ptr<dist::Communicator> comm, const std::string& name, const Layout& l) {
    std::vector<std::string> extra = model(l);
    return runs_.run(std::move(comm), name, l, std::move(extra));
  }
  // The single-process run of the layout's model (dp=1, no ZeRO, no checkpointing), once per model.
  static const Run& reference(const Layout& l) {
    Layout one = data_parallel(1);
    one.capacity = l.capacity;
    one.arch = l.arch;
    auto& slot = references_[one.name()];
    if (!slot) slot = std::make_unique<Run>(run(dist::self_communicator(), one.name() + "_reference", one));
    return *slot;
  }

  static inline testing::LayoutRuns runs_;
  static inline std::map<std::string, std::unique_ptr<Run>> references_;
};

TEST_P(MoELayouts, FollowsTheSingleProcessRun) {
  const Layout& l = GetParam();
  if (l.ranks() != runs_.world->size()) GTEST_SKIP() << "needs " << l.ranks() << " ranks";
  const Run got = run(runs_.world, l.name(), l);
  ASSERT_EQ(got.summary.losses.size(), 20u);
  testing::LayoutRuns::expect_follows(got, reference(l));
  EXPECT_LT(got.summary.losses.back(), got.summary.losses.front());
}

// Experts are stored in global coordinates: a run saved at step 10 under ep2 × dp2 with ZeRO-1 resumes
// under ep4 (each rank reading other experts) and on one process, following the uninterrupted run.
TEST_F(MoELayouts, ResumesAcrossExpertParallelSizes) {
  if (runs_.world->size() != 4) GTEST_SKIP() << "a 4-rank test";
  const Layout saved = expert_parallel(4, 2, 1, 1, 1);
  std::vector<std::string> extra = model(saved);
  for (const char* s : {"dist.expert_parallel_size=2", "dist.zero_stage=1", "checkpoint.interval=10"}) extra.emplace_back(s);
  const Run original = runs_.run(runs_.world, "resume_original", extra);
  const std::string step10 = (runs_.shared / "resume_original" / "checkpoints" / "step_00000010").string();
  std::vector<std::string> ep4 = model(saved);
  ep4.emplace_back("dist.expert_parallel_size=4");
  ep4.push_back("checkpoint.resume=" + step10);
  testing::LayoutRuns::expect_follows(runs_.run(runs_.world, "resume_ep4", ep4), original, 10);
  if (runs_.world->rank() == 0) {
    std::vector<std::string> one = model(saved);
    one.push_back("checkpoint.resume=" + step10);
    testing::LayoutRuns::expect_follows(runs_.run(dist::self_communicator(), "resume_single", one), original, 10);
  }
  runs_.world->barrier();
}

INSTANTIATE_TEST_SUITE_P(Layouts, MoELayouts,
                         ::testing::Values(data_parallel(2, 0, false, 0),    // dp=2
                                           data_parallel(2, 1, false, 0),    // dp=2, ZeRO-1
                                           data_parallel(2, 0, true, 0),     // dp=2, activation checkpointing
                                           data_parallel(2, 0, false, 1.0),  // dp=2, capacity dispatch
                                           data_parallel(2, 1, true, 0, "qwen2_moe"),  // Qwen2-MoE, ZeRO-1, checkpointing
                                           data_parallel(4, 3, false, 0),    // dp=4, ZeRO-3 (recomputed units)
                                           expert_parallel(2, 2),     // ep2
                                           expert_parallel(2, 2, 1, 1, 0, 1.0),  // ep2, capacity dispatch
                                           expert_parallel(4, 4),     // ep4: one expert per rank
                                           expert_parallel(4, 2, 1, 1, 1),       // ep2 × dp2, ZeRO-1
                                           expert_parallel(4, 2, 1, 1, 0, 1.0),  // ep2 × dp2, capacity dispatch
                                           expert_parallel(2, 2, 2),  // ep2 × tp2
                                           expert_parallel(2, 2, 1, 2),          // ep2 × pp2
                                           expert_parallel(4, 2, 2),  // dp2 × ep2 × tp2 (8 ranks)
                                           [] {  // Qwen2-MoE (shared expert), ep2 × dp2
                                             Layout l = expert_parallel(4, 2);
                                             l.arch = "qwen2_moe";
                                             return l;
                                           }()),
                         [](const auto& p) { return p.param.name(); });

}  // namespace
}  // namespace trident::train
