// Layout equivalence of pipeline parallelism and full 3D parallelism
// (docs/numerics.md#layout-equivalence), under mpirun with 2, 4 and 8 ranks: the same config trained
// as one process (the reference, on every rank) and across the job with each
// case's layout follows the same loss curve (relative 1e-5 per step over 20
// steps, fp32, dropout on) and ends with the same parameters, read back from
// the checkpoint the stages wrote together (relative 1e-5).
//
// An 8-layer tiny GPT-2 (tied embeddings: the last stage's copy of the token
// embedding is kept equal through the embedding group), LLaMA (GQA, SwiGLU,
// untied head), Mistral (a sliding window of 5 tokens) and Qwen2 (q/k/v biases); a global batch of 8 in micro-batches of 2, so a
// pipeline of one data-parallel replica runs 4 micro-batches per step.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "layout_runs.h"
#include "testing/layout_case.h"
#include "trident/dist/self_communicator.h"

namespace trident::train {
namespace {

using Layout = testing::LayoutCase;

// A pipeline case: `pp` stages under `schedule`, with tensor and data parallelism, sequence parallelism,
// a ZeRO stage and an explicit split (dist.pipeline_num_layers).
Layout L(std::string arch, int pp = 2, std::string schedule = "1f1b", int tp = 1, int dp = 1, bool sp = false,
         int zero = 0, std::string layers = "") {
  return Layout{.arch = std::move(arch), .dp = dp, .tp = tp, .pp = pp, .sp = sp, .zero = zero,
                .schedule = std::move(schedule), .layers = std::move(layers)};
}

class PipelineParallelTraining : public ::testing::TestWithParam<Layout> {
 protected:
  static void SetUpTestSuite() { runs_.set_up("pp"); }
  static void TearDownTestSuite() { runs_.tear_down(); }

  using Run = testing::LayoutRuns::Run;
  static Run run(std::shared_ptr<dist::Communicator> comm, const std::string& name, const Layout& l,
                 std::vector<std::string> extra = {}) {
    extra.emplace_back("model.n_layer=8");
    if (l.arch != "gpt2") {
      // The LLaMA-shaped families (GQA, SwiGLU, untied head; Mistral's window shorter than the sequence,
      // Qwen2's q/k/v biases). LLaMA runs also mask the loss after end-of-document tokens.
      extra.push_back("model.arch=" + l.arch);
      for (const char* s : {"model.n_head=8", "model.n_kv_head=4", "model.d_ff=64"}) extra.emplace_back(s);
      if (l.arch == "llama") extra.emplace_back("data.eod_mask_loss=true");
      if (l.arch == "mistral") extra.emplace_back("model.sliding_window=5");
    }
    return runs_.run(std::move(comm), name, l, std::move(extra));
  }

  static const Run& reference(const std::string& arch) {
    auto& slot = references_[arch];
    // Checkpoints at steps 10 and 20 (the resume test starts from step 10).
    if (!slot) {
      slot = std::make_unique<Run>(
          run(dist::self_communicator(), "reference-" + arch, L(arch), {"checkpoint.interval=10"}));
    }
    return *slot;
  }

  static inline testing::LayoutRuns runs_;
  static inline std::map<std::string, std::unique_ptr<Run>> references_;
};

TEST_P(PipelineParallelTraining, FollowsTheSingleProcessRun) {
  const Layout& l = GetParam();
  if (l.ranks() != runs_.world->size()) GTEST_SKIP() << "needs " << l.ranks() << " ranks";
  const Run got = run(runs_.world, l.name(), l);
  ASSERT_EQ(got.summary.losses.size(), 20u);
  testing::LayoutRuns::expect_follows(got, reference(l.arch));
}

// The single process's step-10 checkpoint resumes under the pipeline layout
// (each stage reads its own layers; the tied copy of the token embedding and
// its moments come from the first stage's tensors), and steps 11–20 follow
// the uninterrupted run.
TEST_P(PipelineParallelTraining, ResumesTheSingleProcessCheckpoint) {
  const Layout& l = GetParam();
  if (l.ranks() != runs_.world->size() || l.schedule != "1f1b" || !l.layers.empty()) {
    GTEST_SKIP() << "the 1f1b layouts of this job size";
  }
  const Run& ref = reference(l.arch);
  const Run resumed =
      run(runs_.world, l.name() + "-resumed", l, {"checkpoint.resume=" + runs_.rank0_checkpoint(ref, 10)});
  ASSERT_EQ(resumed.summary.losses.size(), 10u);
  testing::LayoutRuns::expect_follows(resumed, ref, 10, /*params=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PipelineParallelTraining,
    ::testing::Values(
        // 2 ranks: every schedule, both architectures; an uneven explicit split.
        L("gpt2", 2, "gpipe"), L("gpt2", 2, "1f1b"), L("gpt2", 2, "interleaved"),
        L("llama", 2, "gpipe"), L("llama", 2, "1f1b"), L("llama", 2, "interleaved"),
        L("gpt2", 2, "1f1b", 1, 1, false, 0, "[3, 5]"),
        // 4 ranks: four stages with every schedule; pipeline × tensor and pipeline × data (ZeRO-1).
        L("gpt2", 4, "gpipe"), L("gpt2", 4, "1f1b"), L("gpt2", 4, "interleaved"),
        L("llama", 4, "gpipe"), L("llama", 4, "1f1b"), L("llama", 4, "interleaved"),
        L("gpt2", 2, "1f1b", 2), L("llama", 2, "interleaved", 1, 2, false, 1),
        // 8 ranks: the seed's dp=2 × tp=2 × pp=2, plain, with sequence parallelism, with ZeRO-1.
        L("gpt2", 2, "1f1b", 2, 2), L("gpt2", 2, "1f1b", 2, 2, true),
        L("gpt2", 2, "interleaved", 2, 2, false, 1), L("llama", 2, "1f1b", 2, 2, true, 1),
        // 8 ranks, the families added through the registry: dp=2 × tp=2 × pp=2 with ZeRO-1.
        L("mistral", 2, "1f1b", 2, 2, false, 1), L("qwen2", 2, "1f1b", 2, 2, true, 1)),
    [](const auto& p) { return p.param.name(); });

}  // namespace
}  // namespace trident::train
