// Layout equivalence of context parallelism (dist.context_parallel_size; docs/parallelism.md#context-parallelism,
// docs/numerics.md#layout-equivalence), under mpirun with 2 and 4 ranks: each sequence split over the cp
// ranks (two mirrored chunks each), attention as a ring of K/V blocks or as the all-to-all, trained for 20
// steps in fp32 with dropout on activations and attention probabilities, follows the single-process run
// (relative 1e-5 per step, validation losses, final parameters):
//   GPT-2 (learned positions) under cp2 and cp4 (ring), cp2 with the all-to-all, cp2 with activation
//   checkpointing (the ring re-run in the backward), cp2 × tp2 with sequence parallelism, cp2 × pp2,
//   cp2 × dp2 with ZeRO-2 and ZeRO-3;
//   LLaMA (RoPE, grouped-query attention), Mistral (a sliding window of 12 across chunks of 8) and a
//   Mixtral (dropless experts, load-balancing and z losses; under cp2 and cp2 × ep2 with dp2) under cp2;
//   packed documents (data.reset_attention_mask and reset_position_ids) with GPT-2 and LLaMA under cp2.
// And a run saved under cp2 × dp2 with ZeRO-1 resumes under cp4 and on one process.
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

struct Case {
  Layout layout;
  bool documents = false;  // data.reset_attention_mask and data.reset_position_ids
  std::string name() const { return layout.name() + (documents ? "_documents" : ""); }
};

// The model keys of each architecture's case (the reference takes the same).
std::vector<std::string> model_keys(const Case& c) {
  std::vector<std::string> m = {"model.arch=" + c.layout.arch};
  if (c.layout.arch != "gpt2") m.emplace_back("model.n_kv_head=2");
  if (c.layout.arch == "mistral") m.emplace_back("model.sliding_window=12");
  if (c.layout.arch == "mixtral") {
    for (const char* k : {"model.d_ff=32", "model.n_experts=4", "model.experts_per_token=2",
                          "model.moe_aux_loss_coef=0.05", "model.moe_z_loss_coef=0.01"})
      m.emplace_back(k);
  }
  if (c.documents) {
    m.emplace_back("data.reset_attention_mask=true");
    m.emplace_back("data.reset_position_ids=true");
  }
  return m;
}

class ContextParallel : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { runs_.set_up("context"); }
  static void TearDownTestSuite() { runs_.tear_down(); }

  static LayoutRun run(std::shared_ptr<dist::Communicator> comm, const std::string& name, const Case& c,
                       std::vector<std::string> more = {}) {
    std::vector<std::string> extra = model_keys(c);
    extra.insert(extra.end(), more.begin(), more.end());
    return runs_.run(std::move(comm), name, c.layout, std::move(extra));
  }
  // The single-process run of a case's model, once per model.
  static const LayoutRun& reference(const Case& c) {
    const Case one{Layout{.arch = c.layout.arch}, c.documents};
    return runs_.reference(one.name(), [&] { return run(dist::self_communicator(), one.name() + "_reference", one); });
  }

  static inline testing::LayoutRuns runs_;
};

TEST_P(ContextParallel, FollowsTheSingleProcessRun) {
  const Case& c = GetParam();
  if (c.layout.ranks() != runs_.world->size()) GTEST_SKIP() << "needs " << c.layout.ranks() << " ranks";
  const LayoutRun got = run(runs_.world, c.name(), c);
  ASSERT_EQ(got.summary.losses.size(), 20u);
  testing::LayoutRuns::expect_follows(got, reference(c));
}

// Checkpoints hold global tensors: a run saved at step 10 under cp2 × dp2 with ZeRO-1 resumes under cp4
// and on one process, following the uninterrupted run.
TEST_F(ContextParallel, ResumesUnderAnotherContextParallelSize) {
  if (runs_.world->size() != 4) GTEST_SKIP() << "a 4-rank test";
  const Case saved{Layout{.arch = "llama", .dp = 2, .zero = 1, .cp = 2}};
  const LayoutRun original = run(runs_.world, "resume_original", saved, {"checkpoint.interval=10"});
  const std::string step10 = (runs_.shared / "resume_original" / "checkpoints" / "step_00000010").string();
  const Case cp4{Layout{.arch = "llama", .cp = 4}};
  testing::LayoutRuns::expect_follows(run(runs_.world, "resume_cp4", cp4, {"checkpoint.resume=" + step10}), original,
                                      10);
  if (runs_.world->rank() == 0) {
    const Case one{Layout{.arch = "llama"}};
    testing::LayoutRuns::expect_follows(
        run(dist::self_communicator(), "resume_single", one, {"checkpoint.resume=" + step10}), original, 10);
  }
  runs_.world->barrier();
}

INSTANTIATE_TEST_SUITE_P(Layouts, ContextParallel,
                         ::testing::Values(Case{Layout{.cp = 2}},                                // ring
                                           Case{Layout{.cp = 2, .cp_algorithm = "all_to_all"}},  // Ulysses
                                           Case{Layout{.arch = "llama", .cp = 2}},               // RoPE, GQA
                                           Case{Layout{.arch = "mistral", .cp = 2}},             // window across chunks
                                           Case{Layout{.arch = "mixtral", .cp = 2}},  // experts' losses over cp
                                           Case{Layout{.cp = 2}, true},               // packed documents
                                           Case{Layout{.arch = "llama", .cp = 2}, true},
                                           Case{Layout{.checkpointing = true, .cp = 2}},  // the ring recomputed
                                           Case{Layout{.cp = 4}},                         // chunks of 4 tokens
                                           Case{Layout{.tp = 2, .sp = true, .cp = 2}},    // cp × tp with SP
                                           Case{Layout{.pp = 2, .cp = 2}},                // cp × pp
                                           Case{Layout{.dp = 2, .zero = 2, .cp = 2}},     // cp × dp, ZeRO-2
                                           Case{Layout{.dp = 2, .zero = 3, .cp = 2}},     // cp × dp, ZeRO-3
                                           Case{Layout{.arch = "mixtral", .dp = 2, .ep = 2, .cp = 2}}),  // cp × ep
                         [](const auto& p) { return p.param.name(); });

}  // namespace
}  // namespace trident::train
