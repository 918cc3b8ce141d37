// trident plan's layout search, traffic and bubble (train/plan/plan.h). The memory model against measured
// peaks is plan_memory_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>

#include "corpus_suite.h"
#include "trident/core/error.h"
#include "trident/models/family.h"
#include "trident/train/plan/plan.h"
#include "trident/train/trainer.h"

namespace trident::train {
namespace {

class PlanSearch : public testing::CorpusSuite<PlanSearch> {
 public:
  static constexpr const char* kDir = "plan-test";
  static constexpr int kLines = 300;

 protected:

  // Family `f`'s first preset on the test corpus, a global batch of 48 sequences.
  static Config config(const models::Family& f) {
    Config c = load_config("", testing::tiny_run(dir_, "cache"));
    c.model = ModelConfig{};
    c.model.arch = f.name;
    c.model.preset = f.presets.front().name;
    c.train.global_batch_size = 48;
    c.train.micro_batch_size = 1;
    return c;
  }
};

const Hardware kHardware{100e12L, 25e9L, 300e9L, 8};

// Every layout the search proposes, for every family and several rank counts, is one the training
// command accepts (validate_config, the whole of it) and whose model builds its tensor-parallel split.
TEST_F(PlanSearch, ProposesOnlyLayoutsTrainingAccepts) {
  for (const models::Family* f : models::families()) {
    ASSERT_FALSE(f->presets.empty()) << f->name;
    const Config c = config(*f);
    const models::TransformerSpec spec = planned_spec(c);
    for (int n : {1, 2, 3, 4, 6, 8, 16}) {
      const std::vector<LayoutCost> fits = search_layouts(c, spec, n, 1e30L, kHardware);
      EXPECT_FALSE(fits.empty()) << f->name << " on " << n << " ranks";
      for (const LayoutCost& cost : fits) {
        const Config proposed = with_layout(c, cost.layout);
        EXPECT_NO_THROW(validate_config(proposed, n)) << f->name << " " << cost.layout.describe();
        EXPECT_NO_THROW(spec.validate_tensor_parallel(static_cast<int>(cost.layout.tp))) << cost.layout.describe();
        EXPECT_EQ(cost.layout.ranks(), n);
        EXPECT_EQ(cost.memory.stages.size(), static_cast<std::size_t>(cost.layout.pp));
      }
      for (std::size_t i = 1; i < fits.size(); ++i) EXPECT_LE(fits[i - 1].step_s(), fits[i].step_s());
    }
  }
}

// The memory limit is a bound: every proposal fits it, and a tighter one leaves fewer.
TEST_F(PlanSearch, KeepsOnlyLayoutsUnderTheMemoryLimit) {
  const Config c = config(models::family("llama"));
  const models::TransformerSpec spec = planned_spec(c);
  const auto all = search_layouts(c, spec, 8, 1e30L, kHardware);
  ASSERT_GT(all.size(), 2U);
  long double lo = all.front().memory.total(), hi = lo;
  for (const LayoutCost& l : all) lo = std::min(lo, l.memory.total()), hi = std::max(hi, l.memory.total());
  const long double limit = (lo + hi) / 2;
  const auto some = search_layouts(c, spec, 8, limit, kHardware);
  EXPECT_LT(some.size(), all.size());
  EXPECT_FALSE(some.empty());
  for (const LayoutCost& l : some) EXPECT_LE(l.memory.total(), limit);
  EXPECT_TRUE(search_layouts(c, spec, 8, lo / 2, kHardware).empty());
}

TEST(PlanCost, BubbleAndTrafficFollowTheLayout) {
  MemoryLayout l;
  l.pp = 4;
  l.accumulation = 8;
  EXPECT_DOUBLE_EQ(static_cast<double>(bubble_fraction(l)), 3.0 / 11);
  l.schedule = "interleaved";
  l.virtual_stages = 2;
  EXPECT_DOUBLE_EQ(static_cast<double>(bubble_fraction(l)), 3.0 / 19);
  l.pp = 1;
  EXPECT_EQ(bubble_fraction(l), 0);

  Config c;
  c.train.micro_batch_size = 2;
  c.train.seq_len = 128;
  const models::TransformerSpec s = models::preset("llama-tiny");
  MemoryLayout dp;
  dp.dp = 4;
  const auto zero0 = step_traffic(c, s, dp);
  ASSERT_EQ(zero0.size(), 1U);
  EXPECT_EQ(zero0[0].group, "dp");
  // A ring all-reduce of the f32 gradients sends 2(d − 1)/d of them.
  EXPECT_NEAR(static_cast<double>(zero0[0].bytes), 2 * 0.75 * 4 * static_cast<double>(s.num_parameters()),
              1e-6 * static_cast<double>(zero0[0].bytes));
  dp.zero_stage = 3;
  EXPECT_GT(step_traffic(c, s, dp)[0].bytes, zero0[0].bytes);
  MemoryLayout tp;
  tp.tp = 2;
  const auto t = step_traffic(c, s, tp);
  ASSERT_EQ(t.size(), 1U);
  EXPECT_EQ(t[0].group, "tp");
  // 4 all-reduces per layer and one for the embedding, of micro-batch × seq_len × d_model f32 values.
  const double payload = 2.0 * 128 * static_cast<double>(s.d_model) * 4;
  EXPECT_NEAR(static_cast<double>(t[0].bytes), (4.0 * static_cast<double>(s.n_layer) + 1) * payload, 1e-6 * payload);
}

// Context parallelism: the ring moves each rank's K/V (c − 1) times forward and backward, plus the f32
// dK/dV accumulators c times; the gradients reduce over dp × cp; each rank holds T/c tokens.
TEST(PlanCost, ContextParallelTrafficAndTokens) {
  Config c;
  c.train.micro_batch_size = 2;
  c.train.seq_len = 512;
  const models::TransformerSpec s = models::preset("llama-tiny");
  MemoryLayout cp;
  cp.cp = 2;
  const auto t = step_traffic(c, s, cp);
  ASSERT_EQ(t.size(), 2U);
  EXPECT_EQ(t[0].group, "dp-cp");
  EXPECT_EQ(t[1].group, "cp");
  const double kv = 2.0 * 2 * 256 * static_cast<double>(s.n_kv_head * (s.d_model / s.n_head));  // K and V, local
  EXPECT_NEAR(static_cast<double>(t[1].bytes), static_cast<double>(s.n_layer) * (2 * kv * 4 + 2 * kv * 4),
              1e-6 * static_cast<double>(t[1].bytes));
  MemoryLayout one;
  const MemoryEstimate whole = estimate_memory(c, s, one), half = estimate_memory(c, s, cp);
  EXPECT_NEAR(static_cast<double>(half.stages[0].activations_per_micro_batch),
              static_cast<double>(whole.stages[0].activations_per_micro_batch) / 2, 1.0);
  EXPECT_EQ(cp.ranks(), 2);
  EXPECT_EQ(cp.describe(), "dp1 tp1 cp2 pp1");
}

// Block-sparse attention's layout scales the attention's share of the step time by its density.
TEST(PlanCost, SparseAttentionScalesTheAttentionWork) {
  Config c;
  c.train.micro_batch_size = 1;
  c.train.seq_len = 1024;
  models::TransformerSpec s = models::preset("llama-tiny");
  s.max_seq_len = 1024;
  const LayoutCost dense = layout_cost(c, s, MemoryLayout{}, kHardware);
  s.sparse_attention.mode = "bslongformer";
  s.sparse_attention.block = 64;
  const LayoutCost sparse = layout_cost(c, s, MemoryLayout{}, kHardware);
  EXPECT_LT(sparse.compute_s, dense.compute_s);
  EXPECT_NE(format_plan(c, s, sparse).find("block-sparse attention (bslongformer, blocks of 64): "),
            std::string::npos);
}

}  // namespace
}  // namespace trident::train
