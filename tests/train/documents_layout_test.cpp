// Layout equivalence of packed documents (data.reset_attention_mask and data.reset_position_ids;
// docs/numerics.md#layout-equivalence), under mpirun with 2 ranks: the tiny GPT (learned positions) and
// LLaMA (RoPE, grouped-query attention), each token attending within its document and positions
// restarting at each, trained under dp=2, tp=2 with sequence parallelism and pp=2 (where the second
// stage reads the micro-batches for their document starts), follow the single-process run (relative 1e-5
// per step over 10 steps, validation losses, final parameters). And the single-process run with the
// documents differs from the one without (the masks do something).
#include <gtest/gtest.h>

#include "layout_runs.h"
#include "testing/layout_case.h"
#include "trident/dist/self_communicator.h"

namespace trident::train {
namespace {

using Layout = testing::LayoutCase;
using LayoutRun = testing::LayoutRuns::Run;

const std::vector<std::string> kDocuments = {"data.reset_attention_mask=true", "data.reset_position_ids=true"};

class DocumentLayouts : public ::testing::TestWithParam<Layout> {
 protected:
  static void SetUpTestSuite() { runs_.set_up("documents"); }
  static void TearDownTestSuite() { runs_.tear_down(); }

  // `l`'s run (the layout's keys only on a job of several ranks) with `extra`.
  static LayoutRun run(std::shared_ptr<dist::Communicator> comm, const std::string& name, const Layout& l,
                       std::vector<std::string> extra = kDocuments) {
    extra.insert(extra.end(), {"train.steps=10", "model.arch=" + l.arch});
    return runs_.run(std::move(comm), name, l, std::move(extra));
  }
  static const LayoutRun& reference(const std::string& arch) {
    return runs_.reference(arch, [&] { return run(dist::self_communicator(), "reference_" + arch, Layout{.arch = arch}); });
  }

  static inline testing::LayoutRuns runs_;
};

TEST_P(DocumentLayouts, FollowsTheSingleProcessRun) {
  const Layout& l = GetParam();
  if (l.ranks() != runs_.world->size()) GTEST_SKIP() << "needs " << l.ranks() << " ranks";
  const LayoutRun got = run(runs_.world, l.name(), l);
  ASSERT_EQ(got.summary.losses.size(), 10u);
  testing::LayoutRuns::expect_follows(got, reference(l.arch));
}

INSTANTIATE_TEST_SUITE_P(Layouts, DocumentLayouts,
                         ::testing::Values(Layout{.dp = 2}, Layout{.tp = 2, .sp = true}, Layout{.pp = 2},
                                           Layout{.arch = "llama", .dp = 2},
                                           Layout{.arch = "llama", .tp = 2, .sp = true},
                                           Layout{.arch = "llama", .pp = 2}),
                         [](const auto& p) { return p.param.name(); });

TEST_F(DocumentLayouts, TheDocumentsChangeTraining) {
  if (runs_.world->rank() != 0) GTEST_SKIP() << "one process";
  const LayoutRun across = run(dist::self_communicator(), "across_documents", Layout{.arch = "llama"}, {});
  const LayoutRun& within = reference("llama");
  ASSERT_EQ(across.summary.losses.size(), within.summary.losses.size());
  double moved = 0;
  for (std::size_t i = 0; i < within.summary.losses.size(); ++i)
    moved = std::max(moved, std::abs(across.summary.losses[i] - within.summary.losses[i]));
  EXPECT_GT(moved, 1e-4) << "attention within documents trained as attention across them";
}

}  // namespace
}  // namespace trident::train
