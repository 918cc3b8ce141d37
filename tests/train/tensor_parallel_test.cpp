// Layout equivalence of tensor and sequence parallelism (docs/numerics.md#layout-equivalence), under
// mpirun with 2, 4 and 8 ranks: the same config trained as one process (the
// reference, on every rank) and across the job with the layout of each case
// follows the same loss curve (relative 1e-5 per step over 20 steps, fp32,
// dropout on) and ends with the same parameters — read back from the
// checkpoint, whose tensor-parallel pieces must assemble into the unsharded
// tensors (relative 1e-5). GPT-2 (fused c_attn, tied embeddings, biases) and
// LLaMA (GQA, SwiGLU, untied head); the tiny vocabulary is padded to 128·t.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "layout_runs.h"
#include "testing/layout_case.h"
#include "trident/dist/self_communicator.h"

namespace trident::train {
namespace {

using Layout = testing::LayoutCase;

class TensorParallelTraining : public ::testing::TestWithParam<Layout> {
 protected:
  static void SetUpTestSuite() { runs_.set_up("tp"); }
  static void TearDownTestSuite() { runs_.tear_down(); }

  using Run = testing::LayoutRuns::Run;
  // The layout applies to a job; one process trains the same model unsharded.
  static Run run(std::shared_ptr<dist::Communicator> comm, const std::string& name, const Layout& l,
                 std::vector<std::string> extra = {}) {
    if (l.arch == "llama") {
      // LLaMA runs also mask the loss after end-of-document tokens (data.eod_mask_loss).
      for (const char* s : {"model.arch=llama", "model.n_head=8", "model.n_kv_head=4", "model.d_ff=64",
                            "data.eod_mask_loss=true"})
        extra.emplace_back(s);
    }
    return runs_.run(std::move(comm), name, l, std::move(extra));
  }

  static const Run& reference(const std::string& arch) {
    auto& slot = references_[arch];
    // Checkpoints at steps 10 and 20 (the resume test starts from step 10).
    if (!slot) {
      slot = std::make_unique<Run>(
          run(dist::self_communicator(), "reference-" + arch, Layout{.arch = arch}, {"checkpoint.interval=10"}));
    }
    return *slot;
  }

  static inline testing::LayoutRuns runs_;
  static inline std::map<std::string, std::unique_ptr<Run>> references_;
};

TEST_P(TensorParallelTraining, FollowsTheSingleProcessRun) {
  const Layout& l = GetParam();
  if (l.tp * l.dp != runs_.world->size()) GTEST_SKIP() << "needs " << l.tp * l.dp << " ranks";
  const Run got = run(runs_.world, l.name(), l);
  ASSERT_EQ(got.summary.losses.size(), 20u);
  testing::LayoutRuns::expect_follows(got, reference(l.arch));
}

// A checkpoint written by the single process resumes under tensor parallelism
// over the whole job with the case's ZeRO stage (data parallelism is then 1):
// its pieces are read back as this rank's shards and ZeRO partitions, moments
// included, and steps 11–20 follow the uninterrupted single-process run.
TEST_P(TensorParallelTraining, ResumesTheSingleProcessCheckpoint) {
  const Layout& l = GetParam();
  if (l.tp != runs_.world->size() || l.sp) {
    GTEST_SKIP() << "tensor parallelism over the whole job, without sequence parallelism";
  }
  const Run& ref = reference(l.arch);
  const Run resumed =
      run(runs_.world, l.name() + "-resumed", l, {"checkpoint.resume=" + runs_.rank0_checkpoint(ref, 10)});
  ASSERT_EQ(resumed.summary.losses.size(), 10u);
  testing::LayoutRuns::expect_follows(resumed, ref, 10, /*params=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TensorParallelTraining,
    ::testing::Values(Layout{.arch = "gpt2", .tp = 2}, Layout{.arch = "llama", .tp = 2},
                      Layout{.arch = "gpt2", .tp = 2, .sp = true}, Layout{.arch = "llama", .tp = 2, .sp = true},
                      Layout{.arch = "gpt2", .tp = 4}, Layout{.arch = "llama", .tp = 4},
                      Layout{.arch = "gpt2", .dp = 2, .tp = 2, .zero = 1},
                      Layout{.arch = "llama", .dp = 2, .tp = 2, .zero = 3},
                      Layout{.arch = "gpt2", .dp = 2, .tp = 2, .zero = 3},
                      Layout{.arch = "llama", .dp = 2, .tp = 2, .sp = true, .zero = 1},
                      Layout{.arch = "gpt2", .dp = 2, .tp = 4}, Layout{.arch = "llama", .dp = 2, .tp = 4, .sp = true, .zero = 1}),
    [](const auto& p) { return p.param.name(); });

}  // namespace
}  // namespace trident::train
