// Layout equivalence of mixture-of-experts training (docs/numerics.md#layout-equivalence), under mpirun
// with 2 and 4 ranks: a tiny Mixtral (4 experts, 2 per token, the load-balancing and z losses on; and a
// Qwen2-MoE with its shared expert)
// trained as one process (the reference, on every rank) and across the job under dp=2, dp=2 with
// ZeRO-1, dp=4 with ZeRO-3 (blocks recomputed: the aux loss leaves each unit as an output) and dp=2 with
// activation checkpointing follows the same loss curve (relative 1e-5 per step over 20 steps, fp32) and
// validation losses, and ends with the same parameters; also with capacity dispatch (factor 1, tokens
// dropped), whose drops depend only on the micro-batch. Each micro-batch's aux loss counts by its share
// of the global batch's tokens, and a data-parallel rank's micro-batches are the single process's.
// Expert parallelism is issue 23's next step; tensor and pipeline parallelism with experts are errors.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "layout_runs.h"
#include "trident/dist/self_communicator.h"

namespace trident::train {
namespace {

struct Layout {
  int dp = 1, zero = 0;
  bool checkpointing = false;
  double capacity = 0;  // 0: dropless
  std::string arch = "mixtral";
  int ranks() const { return dp; }
  std::string name() const {
    return fmt::format("{}_dp{}{}{}{}", arch, dp, zero ? fmt::format("_zero{}", zero) : "",
                       checkpointing ? "_ckpt" : "", capacity > 0 ? "_capacity" : "");
  }
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name(); }

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
    if (comm->size() > 1) {
      extra.push_back(fmt::format("dist.zero_stage={}", l.zero));
      extra.push_back(fmt::format("train.activation_checkpointing={}", l.checkpointing));
    }
    return runs_.run(std::move(comm), name, extra);
  }
  // The single-process run of the layout's model (dp=1, no ZeRO, no checkpointing), once per model.
  static const Run& reference(const Layout& l) {
    Layout one;
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

INSTANTIATE_TEST_SUITE_P(Layouts, MoELayouts,
                         ::testing::Values(Layout{2, 0, false, 0},    // dp=2
                                           Layout{2, 1, false, 0},    // dp=2, ZeRO-1
                                           Layout{2, 0, true, 0},     // dp=2, activation checkpointing
                                           Layout{2, 0, false, 1.0},  // dp=2, capacity dispatch
                                           Layout{2, 1, true, 0, "qwen2_moe"},  // Qwen2-MoE, ZeRO-1, checkpointing
                                           Layout{4, 3, false, 0}),   // dp=4, ZeRO-3 (recomputed units)
                         [](const auto& p) { return p.param.name(); });

}  // namespace
}  // namespace trident::train
