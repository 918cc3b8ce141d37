// Layout equivalence of BERT masked-LM training (docs/numerics.md#layout-equivalence), under mpirun with 2,
// 4 and 8 ranks: a tiny BERT (post-norm blocks, token types, the MLM head tied to the word embeddings,
// dropout on) trained on masked samples as one process (the reference, on every rank) and across the job
// under dp=2, cp=2 (ring and all-to-all: bidirectional attention over chunks), tp=2 with sequence
// parallelism, pp=2, dp=4 with ZeRO-3 and dp=2 × tp=2 × pp=2 follows the
// same loss curve (relative 1e-5 per step over 20 steps, fp32) and validation losses, and ends with the
// same parameters. The masks are drawn at global sample coordinates (data/dataset/masked_lm.h), so every layout
// masks the same tokens, and the loss is the mean over the global batch's masked tokens. The validation MLM
// accuracy follows the single process's too.
#include <gtest/gtest.h>

#include <memory>

#include "layout_runs.h"
#include "testing/layout_case.h"
#include "trident/dist/self_communicator.h"

namespace trident::train {
namespace {

using Layout = testing::LayoutCase;

// A WordPiece tokenizer and masked-LM data ([CLS] document [SEP]) of the grammar corpus, in DIR.
class BertLayouts : public ::testing::TestWithParam<Layout> {
 protected:
  static void SetUpTestSuite() {
    runs_.set_up("bert");
    if (runs_.world->rank() == 0) testing::make_bert_corpus(runs_.shared / "bert");
    runs_.world->barrier();
  }
  static void TearDownTestSuite() { runs_.tear_down(); }

  using Run = testing::LayoutRuns::Run;
  static Run run(std::shared_ptr<dist::Communicator> comm, const std::string& name, const Layout& l) {
    const std::filesystem::path dir = runs_.shared / "bert";
    std::vector<std::string> extra = {"model.arch=bert", "model.n_layer=4", "model.d_ff=64",
                                      "data.tokenizer=" + (dir / "tokenizer.json").string(),
                                      "data.paths=[\"" + (dir / "corpus").string() + "\"]",
                                      "data.cache_dir=" + (dir / "cache").string()};
    return runs_.run(std::move(comm), name, l, std::move(extra));
  }
  static const Run& reference() {
    if (!reference_) reference_ = std::make_unique<Run>(run(dist::self_communicator(), "reference", Layout{}));
    return *reference_;
  }

  static inline testing::LayoutRuns runs_;
  static inline std::unique_ptr<Run> reference_;
};

TEST_P(BertLayouts, FollowsTheSingleProcessRun) {
  const Layout& l = GetParam();
  if (l.ranks() != runs_.world->size()) GTEST_SKIP() << "needs " << l.ranks() << " ranks";
  const Run got = run(runs_.world, l.name(), l);
  ASSERT_EQ(got.summary.losses.size(), 20u);
  testing::LayoutRuns::expect_follows(got, reference());
  // Masked-LM learns: the loss of the last steps is below the first's.
  EXPECT_LT(got.summary.losses.back(), got.summary.losses.front());
  // The validation accuracy at the masked positions is the argmax over the whole vocabulary (across the
  // tensor-parallel shards), counted over the pipeline's last stage and every data-parallel rank: the
  // reference's, up to a rare near-tie that the layouts' rounding may flip (one prediction in a hundred).
  ASSERT_EQ(got.summary.val_mlm_accuracies.size(), reference().summary.val_mlm_accuracies.size());
  ASSERT_FALSE(got.summary.val_mlm_accuracies.empty());
  for (std::size_t i = 0; i < got.summary.val_mlm_accuracies.size(); ++i) {
    const auto& [step, accuracy] = got.summary.val_mlm_accuracies[i];
    EXPECT_EQ(step, reference().summary.val_mlm_accuracies[i].first);
    EXPECT_NEAR(accuracy, reference().summary.val_mlm_accuracies[i].second, 0.01) << "step " << step;
  }
  EXPECT_GT(got.summary.val_mlm_accuracies.back().second, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, BertLayouts,
                         ::testing::Values(Layout{.arch = "bert", .dp = 2},
                                           Layout{.arch = "bert", .cp = 2},  // bidirectional over chunks
                                           Layout{.arch = "bert", .cp = 2, .cp_algorithm = "all_to_all"},
                                           Layout{.arch = "bert", .tp = 2, .sp = true},  // with sequence parallelism
                                           Layout{.arch = "bert", .pp = 2},
                                           Layout{.arch = "bert", .dp = 4, .zero = 3},
                                           Layout{.arch = "bert", .dp = 2, .tp = 2, .pp = 2, .zero = 1}),
                         [](const auto& p) { return p.param.name(); });

}  // namespace
}  // namespace trident::train
