// Layout equivalence of block-sparse attention (model.sparse_attention, DeepSpeed's modes;
// docs/numerics.md#layout-equivalence), under mpirun with 2 ranks: a GPT-2 with per-head BigBird layouts
// (random blocks drawn per global head, so a tensor-parallel rank reads its heads' rows of the layout) and
// a LLaMA with the unidirectional fixed pattern, trained under dp=2 and tp=2 with sequence parallelism,
// follow the single-process run (relative 1e-5 per step over 20 steps, validation losses, final
// parameters). And the sparse run differs from the dense one (the layout does something).
#include <gtest/gtest.h>

#include "layout_runs.h"
#include "testing/layout_case.h"
#include "trident/dist/self_communicator.h"

namespace trident::train {
namespace {

using Layout = testing::LayoutCase;
using LayoutRun = testing::LayoutRuns::Run;

// Blocks of 4 tokens over train.seq_len = 32: 8 blocks per sequence.
std::vector<std::string> sparse_keys(const std::string& arch) {
  if (arch == "llama")
    return {"model.n_kv_head=2", "model.sparse_attention.mode=fixed", "model.sparse_attention.block=4",
            "model.sparse_attention.num_local_blocks=2", "model.sparse_attention.attention=unidirectional"};
  return {"model.sparse_attention.mode=bigbird", "model.sparse_attention.block=4",
          "model.sparse_attention.num_random_blocks=1", "model.sparse_attention.num_sliding_window_blocks=1",
          "model.sparse_attention.different_layout_per_head=true"};
}

class SparseAttentionLayouts : public ::testing::TestWithParam<Layout> {
 protected:
  static void SetUpTestSuite() { runs_.set_up("sparse"); }
  static void TearDownTestSuite() { runs_.tear_down(); }

  static LayoutRun run(std::shared_ptr<dist::Communicator> comm, const std::string& name, const Layout& l,
                       bool sparse = true) {
    std::vector<std::string> extra = {"model.arch=" + l.arch};
    if (sparse) {
      const auto keys = sparse_keys(l.arch);
      extra.insert(extra.end(), keys.begin(), keys.end());
    } else if (l.arch == "llama") {
      extra.emplace_back("model.n_kv_head=2");
    }
    return runs_.run(std::move(comm), name, l, std::move(extra));
  }
  static const LayoutRun& reference(const std::string& arch) {
    return runs_.reference(arch, [&] { return run(dist::self_communicator(), "reference_" + arch, Layout{.arch = arch}); });
  }

  static inline testing::LayoutRuns runs_;
};

TEST_P(SparseAttentionLayouts, FollowsTheSingleProcessRun) {
  const Layout& l = GetParam();
  if (l.ranks() != runs_.world->size()) GTEST_SKIP() << "needs " << l.ranks() << " ranks";
  const LayoutRun got = run(runs_.world, l.name(), l);
  ASSERT_EQ(got.summary.losses.size(), 20u);
  testing::LayoutRuns::expect_follows(got, reference(l.arch));
}

INSTANTIATE_TEST_SUITE_P(Layouts, SparseAttentionLayouts,
                         ::testing::Values(Layout{.dp = 2}, Layout{.tp = 2, .sp = true},
                                           Layout{.arch = "llama", .dp = 2}, Layout{.arch = "llama", .tp = 2}),
                         [](const auto& p) { return p.param.name(); });

TEST_F(SparseAttentionLayouts, TheLayoutChangesTraining) {
  if (runs_.world->rank() != 0) GTEST_SKIP() << "one process";
  for (const std::string arch : {"gpt2", "llama"}) {
    const LayoutRun dense = run(dist::self_communicator(), "dense_" + arch, Layout{.arch = arch}, false);
    const LayoutRun& sparse = reference(arch);
    double moved = 0;
    for (std::size_t i = 0; i < sparse.summary.losses.size(); ++i)
      moved = std::max(moved, std::abs(dense.summary.losses[i] - sparse.summary.losses[i]));
    EXPECT_GT(moved, 1e-4) << arch << ": the sparse layout trained as dense attention";
  }
}

}  // namespace
}  // namespace trident::train
