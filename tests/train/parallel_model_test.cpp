// train::ParallelModel under every layout the job's ranks allow (dp × tp × pp): loaded from a Hugging
// Face directory, trained with the program's own loop (AdamW, dropout on, pipelined when pp > 1) on
// micro-batches of which half the samples are padded (attention masks), it
// follows the single-process model to 1e-5 in every step's loss and gradient norm; its merged save
// holds those parameters, its sharded save holds exactly the same, and the sharded save reads back
// under the layout to exactly the trained parameters.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "trident/core/rng.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/dist/self_communicator.h"
#include "trident/optim/optimizer.h"
#include "trident/train/parallel_model.h"

namespace trident::train {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kMicroBatch = 2, kSeqLen = 16, kPerRank = 2, kSteps = 3;

// Global sample s: random token ids, labels the next ones; an odd sample is right-padded after 5 to 13
// real tokens (id 0, label -100, attention mask 0), as the trainer's data.packing = false pads.
MicroBatch samples(std::int64_t first, std::int64_t vocab) {
  std::vector<std::int64_t> ids, labels, mask;
  for (std::int64_t s = first; s < first + kMicroBatch; ++s) {
    const CounterRng rng(9, "sample/" + std::to_string(s));
    const std::int64_t real = s % 2 ? 5 + s % 9 : kSeqLen + 1;
    for (std::int64_t t = 0; t <= kSeqLen; ++t) {
      const auto id = t < real ? static_cast<std::int64_t>(rng.bits(static_cast<std::uint64_t>(t)) % vocab) : 0;
      if (t < kSeqLen) ids.push_back(id);
      if (t < kSeqLen) mask.push_back(t < real ? 1 : 0);
      if (t > 0) labels.push_back(t < real ? id : -100);
    }
  }
  return {Tensor::from_vector(ids, {kMicroBatch, kSeqLen}), Tensor::from_vector(labels, {kMicroBatch, kSeqLen}),
          Tensor::from_vector(mask, {kMicroBatch, kSeqLen})};
}

std::vector<float> values(const models::TransformerLM& model) {
  std::vector<float> out;
  for (const nn::Parameter* p : model.parameters()) {
    const auto v = p->var.data().to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

class ParallelModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = dist::mpi_world(120.0);
    const double pid = world_->all_reduce_scalar(world_->rank() == 0 ? ::getpid() : 0, dist::ReduceOp::max);
    shared_ = fs::temp_directory_path() / fmt::format("trident-parallel-model-{}", static_cast<long>(pid));
    if (world_->rank() == 0) {
      fs::remove_all(shared_);
      models::TransformerSpec spec = models::preset("gpt2-tiny");
      spec.dropout = 0.1;
      models::TransformerLM model(spec);
      model.initialize(5);
      models::save_hf(model, (shared_ / "hf").string());
    }
    world_->barrier();
  }
  void TearDown() override {
    world_->barrier();
    if (world_->rank() == 0) fs::remove_all(shared_);
  }

  std::shared_ptr<dist::Communicator> world_;
  fs::path shared_;
};

TEST_F(ParallelModelTest, EveryLayoutTrainsLikeOneProcessAndSavesBothWays) {
  const int n = world_->size();
  const std::string hf = (shared_ / "hf").string();
  ParallelModelOptions options;
  options.micro_batch_size = kMicroBatch;
  options.seq_len = kSeqLen;
  options.seed = 3;
  for (const auto& [tp, pp] : {std::pair{1, 1}, {2, 1}, {1, 2}, {2, 2}}) {
    if (n % (tp * pp) != 0) continue;
    const Layout layout{tp, pp};
    SCOPED_TRACE(fmt::format("tp={} pp={} on {} ranks", tp, pp, n));
    auto model = ParallelModel::from_pretrained(hf, world_, layout, options);
    auto whole = ParallelModel::from_pretrained(hf, dist::self_communicator(), {}, options);
    const ParallelGroups& g = model->groups();
    const std::int64_t vocab = model->spec().vocab_size;
    optim::AdamW opt(model->parameters(), {}), whole_opt(whole->parameters(), {});
    for (std::int64_t step = 1; step <= kSteps; ++step) {
      const std::int64_t base = (step - 1) * kPerRank * kMicroBatch * g.dp_size;
      std::vector<MicroBatch> mine, all;
      for (std::int64_t m = 0; m < kPerRank; ++m)
        mine.push_back(samples(base + (m * g.dp_size + g.dp_rank) * kMicroBatch, vocab));
      for (std::int64_t j = 0; j < kPerRank * g.dp_size; ++j) all.push_back(samples(base + j * kMicroBatch, vocab));
      opt.zero_grad();
      whole_opt.zero_grad();
      const double loss = model->forward_backward(mine), expected = whole->forward_backward(all);
      EXPECT_NEAR(loss, expected, 1e-5) << "step " << step;
      EXPECT_NEAR(model->grad_norm(), whole->grad_norm(), 1e-5) << "step " << step;
      opt.step(1e-3);
      whole_opt.step(1e-3);
    }
    const std::string merged = (shared_ / "merged").string(), sharded = (shared_ / "sharded").string();
    model->save_pretrained(merged);
    model->save_pretrained(sharded, {.merged = false});
    EXPECT_EQ(fs::exists(fs::path(sharded) / fmt::format("shard-{:05d}.safetensors", n - 1)), true);
    // Under the layout, the sharded save reads back to exactly this rank's trained parameters.
    const auto back = ParallelModel::from_pretrained(sharded, world_, layout, options);
    for (std::size_t i = 0; i < model->parameters().size(); ++i) {
      EXPECT_EQ(back->parameters()[i]->var.data().to_vector<float>(),
                model->parameters()[i]->var.data().to_vector<float>())
          << model->parameters()[i]->name;
    }
    // Whole: the merged save is the sharded one, and both are the single process's model.
    if (world_->rank() == 0) {
      const std::vector<float> from_merged = values(*models::from_pretrained(merged));
      EXPECT_EQ(from_merged, values(*models::from_pretrained(sharded)));
      // As the trainer's layout tests measure it (tests/train/layout_runs.h): the relative norm.
      const std::vector<float> expected = values(*whole->chunks().front());
      ASSERT_EQ(from_merged.size(), expected.size());
      double num = 0, den = 0;
      for (std::size_t i = 0; i < expected.size(); ++i) {
        num += std::pow(static_cast<double>(from_merged[i]) - expected[i], 2);
        den += std::pow(static_cast<double>(expected[i]), 2);
      }
      EXPECT_LE(std::sqrt(num / den), 1e-5);
    }
    world_->barrier();
  }
}

// A context-parallel size the job cannot hold is refused before any group is made; cp = 1 makes the
// gradients' groups the data-parallel ones themselves.
TEST(ParallelGroups, ContextParallelGroupsAreTheDataParallelOnesWithoutIt) {
  try {
    make_groups(dist::self_communicator(), Layout{.cp = 2});
    FAIL() << "cp = 2 accepted on one rank";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "dist: tensor_parallel_size × pipeline_parallel_size × context_parallel_size = 1 × 1 × 2 = 2 does not "
              "divide the world size 1");
  }
  const ParallelGroups g = make_groups(dist::self_communicator(), Layout{});
  EXPECT_EQ(g.dp_cp, g.dp);
  EXPECT_EQ(g.expert_dp_cp, g.expert_dp);
  EXPECT_EQ(g.cp_size, 1);
}

}  // namespace
}  // namespace trident::train
