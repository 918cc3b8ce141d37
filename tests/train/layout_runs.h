// What the layout-equivalence tests share (docs/numerics.md#layout-equivalence): a job-wide scratch
// directory holding one tiny corpus, training runs in it (the job's, or one
// process's reference in a per-rank directory), the final parameters read back
// from the checkpoint — which exercises assembling sharded pieces — and the
// comparison of a run against the reference (kept once per suite: reference()).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "corpus.h"
#include "testing/layout_case.h"
#include "trident/checkpoint/sharded.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/train/trainer.h"

namespace trident::testing {

class LayoutRuns {
 public:
  struct Run {
    train::TrainSummary summary;
    std::vector<double> params;  // every model/ tensor of the last checkpoint, in key order, f64
  };

  // Rank 0 makes the corpus in a directory named after its pid, so every rank
  // resolves the same paths (the ranks must resolve the same config).
  void set_up(const std::string& tag) {
    world = dist::mpi_world(120.0);
    const double pid = world->all_reduce_scalar(world->rank() == 0 ? ::getpid() : 0, dist::ReduceOp::max);
    shared = std::filesystem::temp_directory_path() / fmt::format("trident-{}-{}", tag, static_cast<long>(pid));
    mine = shared / fmt::format("rank{}", world->rank());
    if (world->rank() == 0) {
      std::filesystem::remove_all(shared);
      make_corpus(shared / "corpus", 1500);
    }
    world->barrier();
  }
  void tear_down() {
    references_.clear();
    world->barrier();
    if (world->rank() == 0) std::filesystem::remove_all(shared);
  }

  // run() of layout l: its dist.* keys on a job of several ranks (one process runs the reference without
  // them), after `extra`.
  Run run(std::shared_ptr<dist::Communicator> comm, const std::string& name, const LayoutCase& l,
          std::vector<std::string> extra) const {
    if (comm->size() > 1) {
      const std::vector<std::string> job = l.overrides();
      extra.insert(extra.end(), job.begin(), job.end());
    }
    return run(std::move(comm), name, extra);
  }

  // The reference run `key` (usually one process's), made by `make` on first use and kept until tear_down:
  // every layout of a suite compares against it.
  const Run& reference(const std::string& key, const std::function<Run()>& make) {
    auto& r = references_[key];
    if (!r) r = std::make_unique<Run>(make());
    return *r;
  }

  // The tiny GPT with 20 steps, micro-batch 2, global batch 8, dropout and clipping, evaluated on one
  // global batch at steps 0, 10 and 20, with a given matmul peak, plus `overrides` (train.epochs among them
  // replaces the 20 steps).
  Run run(std::shared_ptr<dist::Communicator> comm, const std::string& name,
          const std::vector<std::string>& overrides) const {
    const bool single = comm->size() == 1 && world->size() > 1;
    const bool epochs = std::any_of(overrides.begin(), overrides.end(),
                                    [](const std::string& o) { return o.starts_with("train.epochs="); });
    train::TrainOptions o;
    o.overrides = tiny_run(shared / "corpus", "cache");
    if (!epochs) o.overrides.emplace_back("train.steps=20");
    // train.peak_gflops=1: no run spends a second (every rank, after a barrier) measuring the matmul peak.
    for (const char* s : {"train.micro_batch_size=2", "train.global_batch_size=8", "model.dropout=0.1",
                          "optim.clip_grad=1.0", "train.eval_interval=10", "train.eval_steps=1",
                          "train.peak_gflops=1"}) {
      o.overrides.emplace_back(s);
    }
    // Dropout on the attention probabilities too: its masks, drawn per global sample and head, must fall
    // the same under every layout.
    o.overrides.emplace_back("model.attention_dropout=0.1");
    o.overrides.insert(o.overrides.end(), overrides.begin(), overrides.end());
    o.run_dir = (single ? mine / name : shared / name).string();
    o.quiet = true;
    o.world = comm;
    Run r;
    r.summary = train::train(o);
    checkpoint::CheckpointReader reader(r.summary.last_checkpoint);
    for (const auto& key : reader.keys()) {
      if (!key.starts_with("model/")) continue;
      auto v = reader.read(key, DType::f64).to_vector<double>();
      r.params.insert(r.params.end(), v.begin(), v.end());
    }
    return r;
  }

  // Rank 0's copy of checkpoint step_NNNNNNNN of a single-process run: the
  // path every rank resolves the same (the ranks must resolve the same config).
  std::string rank0_checkpoint(const Run& single, std::int64_t step) const {
    const std::filesystem::path dir = std::filesystem::path(single.summary.last_checkpoint).parent_path() /
                                      fmt::format("step_{:08d}", step);
    return (shared / "rank0" / std::filesystem::relative(dir, mine)).string();
  }

  // Per-step losses (from reference step `first`) and the validation losses of
  // the steps both evaluated within 1e-5 relative; with `params`, the final
  // parameters too (relative norm 1e-5).
  static void expect_follows(const Run& got, const Run& ref, std::size_t first = 0, bool params = true) {
    ASSERT_EQ(got.summary.losses.size(), ref.summary.losses.size() - first);
    for (std::size_t i = 0; i < got.summary.losses.size(); ++i) {
      const double want = ref.summary.losses[first + i];
      EXPECT_LE(std::fabs(got.summary.losses[i] - want), 1e-5 * std::fabs(want))
          << "step " << first + i + 1 << ": " << got.summary.losses[i] << " vs " << want;
    }
    EXPECT_FALSE(got.summary.val_losses.empty());
    for (const auto& [step, value] : got.summary.val_losses) {
      const auto want = std::find_if(ref.summary.val_losses.begin(), ref.summary.val_losses.end(),
                                     [step = step](const auto& v) { return v.first == step; });
      ASSERT_NE(want, ref.summary.val_losses.end()) << "the reference did not evaluate at step " << step;
      EXPECT_LE(std::fabs(value - want->second), 1e-5 * std::fabs(want->second))
          << "val loss at step " << step << ": " << value << " vs " << want->second;
    }
    if (!params) return;
    ASSERT_EQ(got.params.size(), ref.params.size());
    double num = 0, den = 0;
    for (std::size_t i = 0; i < got.params.size(); ++i) {
      num += (got.params[i] - ref.params[i]) * (got.params[i] - ref.params[i]);
      den += ref.params[i] * ref.params[i];
    }
    EXPECT_LE(std::sqrt(num / den), 1e-5);
  }

  std::shared_ptr<dist::Communicator> world;
  std::filesystem::path shared, mine;

 private:
  std::map<std::string, std::unique_ptr<Run>> references_;
};

}  // namespace trident::testing
