// Layout equivalence of data parallelism and ZeRO (DESIGN.md §1), under mpirun:
// the same config trained on every rank as one process (the reference) and
// across the job with dp = world size and ZeRO stage 0–3 follows the same
// loss curve (relative 1e-5 per step over 20 steps, fp32, dropout on) and
// ends with the same parameters (relative 1e-5). With micro-batch 2 and a
// global batch of 8, dp = 2 runs 2 accumulation steps where the reference runs
// 4 (dp=2 × accumulation 2 = dp=1 × accumulation 4).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "corpus.h"
#include "trident/checkpoint/sharded.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/dist/self_communicator.h"
#include "trident/train/trainer.h"

namespace trident::train {
namespace {

namespace fs = std::filesystem;

class DataParallel : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {
    world_ = dist::mpi_world(120.0);
    // One directory for the job (named after rank 0's pid) with one corpus, made by rank 0;
    // every rank must resolve the same config, so the paths are the same everywhere.
    const double pid = world_->all_reduce_scalar(world_->rank() == 0 ? ::getpid() : 0, dist::ReduceOp::max);
    shared_ = fs::temp_directory_path() / fmt::format("trident-dp-{}", static_cast<long>(pid));
    mine_ = shared_ / fmt::format("rank{}", world_->rank());
    if (world_->rank() == 0) {
      fs::remove_all(shared_);
      testing::make_corpus(shared_ / "corpus", 1500);
    }
    world_->barrier();
    reference_ = run(dist::self_communicator(), "reference", 0);
  }
  static void TearDownTestSuite() {
    world_->barrier();
    if (world_->rank() == 0) fs::remove_all(shared_);
  }

  struct Run {
    TrainSummary summary;
    std::vector<double> params;
  };

  static Run run(std::shared_ptr<dist::Communicator> comm, const std::string& name, int zero_stage) {
    const bool single = comm->size() == 1 && world_->size() > 1;
    TrainOptions o;
    o.overrides = testing::tiny_run(shared_ / "corpus", "cache");
    for (const char* s : {"train.steps=20", "train.micro_batch_size=2", "train.global_batch_size=8",
                          "model.dropout=0.1", "optim.clip_grad=1.0"}) {
      o.overrides.emplace_back(s);
    }
    o.overrides.push_back(fmt::format("dist.zero_stage={}", zero_stage));
    // The run directory is shared by the job (one per rank for the single-process reference).
    o.run_dir = (single ? mine_ / name : shared_ / name).string();
    o.quiet = true;
    o.world = comm;
    Run r;
    r.summary = train(o);
    checkpoint::CheckpointReader reader(r.summary.last_checkpoint);
    for (const auto& key : reader.keys()) {
      if (!key.starts_with("model/")) continue;
      auto v = reader.read(key, DType::f64).to_vector<double>();
      r.params.insert(r.params.end(), v.begin(), v.end());
    }
    return r;
  }

  static inline std::shared_ptr<dist::Communicator> world_;
  static inline fs::path shared_, mine_;
  static inline Run reference_;
};

TEST_P(DataParallel, FollowsTheSingleProcessRun) {
  const int stage = GetParam();
  const Run got = run(world_, fmt::format("dp{}-zero{}", world_->size(), stage), stage);
  ASSERT_EQ(got.summary.losses.size(), 20u);
  for (std::size_t i = 0; i < 20; ++i) {
    const double ref = reference_.summary.losses[i];
    EXPECT_LE(std::fabs(got.summary.losses[i] - ref), 1e-5 * std::fabs(ref))
        << "step " << i + 1 << ": " << got.summary.losses[i] << " vs " << ref;
  }
  ASSERT_EQ(got.params.size(), reference_.params.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.params.size(); ++i) {
    num += (got.params[i] - reference_.params[i]) * (got.params[i] - reference_.params[i]);
    den += reference_.params[i] * reference_.params[i];
  }
  EXPECT_LE(std::sqrt(num / den), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, DataParallel, ::testing::Values(0, 1, 2, 3),
                         [](const auto& p) { return fmt::format("zero{}", p.param); });

}  // namespace
}  // namespace trident::train
