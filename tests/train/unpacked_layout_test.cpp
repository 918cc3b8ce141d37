// Layout equivalence of unpacked, padded samples (data.packing = false; docs/numerics.md#layout-equivalence),
// under mpirun with 2 and 4 ranks: one grammar line per sample, padded to train.seq_len with the attention
// mask, for the tiny GPT (causal plus padding mask) and the tiny BERT (padding mask, masked LM), trained
// under dp=2, tp=2 (BERT with sequence parallelism), pp=2, (BERT) pp=4 and cp=2 (the key masks whole, the
// tokens in chunks), follows the single-process run
// (relative 1e-5 per step over 10 steps, validation losses, final parameters): the loss is the mean over the
// real tokens of the global batch whatever the layout, and every pipeline stage reads the key masks. And a
// single-process run of train.epochs=2, resumed under dp=2 from its checkpoint in the middle of the second
// epoch, continues it.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "layout_runs.h"
#include "testing/layout_case.h"
#include "trident/dist/self_communicator.h"

namespace trident::train {
namespace {

using Layout = testing::LayoutCase;
using LayoutRun = testing::LayoutRuns::Run;

class UnpackedLayouts : public ::testing::TestWithParam<Layout> {
 protected:
  static void SetUpTestSuite() {
    runs_.set_up("unpacked");
    if (runs_.world->rank() == 0) testing::make_bert_corpus(runs_.shared / "bert");
    runs_.world->barrier();
  }
  static void TearDownTestSuite() { runs_.tear_down(); }

  // `arch`'s run of `l` (the layout's keys only on a job of several ranks), plus `extra`.
  static LayoutRun run(std::shared_ptr<dist::Communicator> comm, const std::string& name, const Layout& l,
                 std::vector<std::string> extra = {"train.steps=10"}) {
    extra.emplace_back("data.packing=false");
    if (l.arch == "bert") {
      const std::filesystem::path dir = runs_.shared / "bert";
      extra.insert(extra.end(), {"model.arch=bert", "model.n_layer=4", "model.d_ff=64",
                                 "data.tokenizer=" + (dir / "tokenizer.json").string(),
                                 "data.paths=[\"" + (dir / "corpus").string() + "\"]",
                                 "data.cache_dir=" + (dir / "cache").string()});
    }
    return runs_.run(std::move(comm), name, l, std::move(extra));
  }
  static const LayoutRun& reference(const std::string& arch) {
    return runs_.reference(arch, [&] { return run(dist::self_communicator(), "reference_" + arch, Layout{.arch = arch}); });
  }

  static inline testing::LayoutRuns runs_;
};

TEST_P(UnpackedLayouts, FollowsTheSingleProcessRun) {
  const Layout& l = GetParam();
  if (l.ranks() != runs_.world->size()) GTEST_SKIP() << "needs " << l.ranks() << " ranks";
  const LayoutRun got = run(runs_.world, l.name(), l);
  ASSERT_EQ(got.summary.losses.size(), 10u);
  testing::LayoutRuns::expect_follows(got, reference(l.arch));
}

INSTANTIATE_TEST_SUITE_P(Layouts, UnpackedLayouts,
                         ::testing::Values(Layout{.dp = 2}, Layout{.tp = 2}, Layout{.pp = 2},
                                           Layout{.arch = "bert", .dp = 2},
                                           Layout{.arch = "bert", .tp = 2, .sp = true},
                                           Layout{.arch = "bert", .pp = 2},
                                           // Middle stages: they read the micro-batches for the key masks alone.
                                           Layout{.arch = "bert", .pp = 4},
                                           // Context parallelism: the key masks whole, the tokens in chunks.
                                           Layout{.cp = 2}, Layout{.arch = "bert", .cp = 2}),
                         [](const auto& p) { return p.param.name(); });

// 45 training documents (data.split 3,97,0), two epochs in global batches of 8: ⌊90 / 8⌋ = 11 steps. The
// single-process run saves at step 7 (56 samples: the second epoch); resumed there under dp=2, steps 8–11
// follow it.
TEST_F(UnpackedLayouts, AResumeInTheSecondEpochUnderAnotherLayoutContinues) {
  if (runs_.world->size() != 2) GTEST_SKIP() << "a 2-rank test";
  const std::vector<std::string> epochs = {"train.epochs=2", "data.split=\"3,97,0\"", "checkpoint.interval=7"};
  const LayoutRun single = run(dist::self_communicator(), "epochs_single", Layout{}, epochs);
  ASSERT_EQ(single.summary.losses.size(), 11u);
  std::vector<std::string> resumed_keys = epochs;
  resumed_keys.push_back("checkpoint.resume=" + runs_.rank0_checkpoint(single, 7));
  const LayoutRun resumed = run(runs_.world, "epochs_dp2", Layout{.dp = 2}, resumed_keys);
  testing::LayoutRuns::expect_follows(resumed, single, 7);
}

}  // namespace
}  // namespace trident::train
