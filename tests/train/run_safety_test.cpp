// What keeps bad input from losing data, hanging or training the wrong thing
// (issue 27 A): the run-directory lock, the memory estimate, the truncation of
// metrics.jsonl on resume, and a stop in the middle of a long step.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "corpus.h"
#include "trident/checkpoint/sharded.h"
#include "trident/core/error.h"
#include "trident/models/transformer_lm.h"
#include "trident/train/log/metrics.h"
#include "trident/train/plan/memory_estimate.h"
#include "trident/train/run_lock.h"
#include "trident/train/trainer.h"

namespace trident::train {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("trident-run-safety-{}-{}", ::getpid(), name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A second process holding the lock refuses this one, naming its pid; its SIGKILL frees the directory.
TEST(RunDirLock, RefusedWhileAnotherProcessHoldsItAndFreedByItsSigkill) {
  const fs::path dir = scratch("lock");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    try {
      detail::RunDirLock held((dir / "run").string());
      const char ok = 1;
      if (::write(ready[1], &ok, 1) != 1) ::_exit(2);
      for (;;) ::pause();
    } catch (...) {
      ::_exit(3);
    }
  }
  ::close(ready[1]);
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1) << "the child did not get the lock";
  ::close(ready[0]);
  try {
    detail::RunDirLock second((dir / "run").string());
    ADD_FAILURE() << "a second holder was let in";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(fmt::format("is in use by another training: pid {} on host ", child)), std::string::npos)
        << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << "one line: " << e.message();
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_NO_THROW(detail::RunDirLock again((dir / "run").string()));
  // Released at the end of a run (the same process may lock it again).
  { detail::RunDirLock first((dir / "run").string()); }
  EXPECT_NO_THROW(detail::RunDirLock again((dir / "run").string()));
  fs::remove_all(dir);
}

models::TransformerSpec gpt(std::int64_t layers, std::int64_t d, std::int64_t vocab, std::int64_t positions) {
  models::TransformerSpec s;
  s.family = "gpt2";
  s.n_layer = layers;
  s.n_head = 4;
  s.n_kv_head = 4;
  s.d_model = d;
  s.d_ff = 4 * d;
  s.vocab_size = vocab;
  s.max_seq_len = positions;
  return s;
}

TEST(EstimateMemory, CountsTheModelAndDividesStateByZeroStage) {
  Config c;
  c.train.micro_batch_size = 8;
  c.train.seq_len = 1024;
  const models::TransformerSpec s = gpt(12, 768, 50257, 1024);
  MemoryLayout l;
  const MemoryEstimate plain = estimate_memory(c, s, l);
  EXPECT_DOUBLE_EQ(static_cast<double>(plain.parameter_count), static_cast<double>(s.num_parameters()));
  // The bytes held include the tied vocabulary table's padding (50257 rows padded to 50304).
  EXPECT_DOUBLE_EQ(static_cast<double>(plain.parameters),
                   4.0 * static_cast<double>(s.num_parameters() + (50304 - 50257) * 768));
  EXPECT_DOUBLE_EQ(static_cast<double>(plain.optimizer), 2 * static_cast<double>(plain.parameters));
  l.dp = 4;
  l.zero_stage = 1;
  const MemoryEstimate z1 = estimate_memory(c, s, l);
  EXPECT_DOUBLE_EQ(static_cast<double>(z1.optimizer), static_cast<double>(plain.optimizer) / 4);
  EXPECT_DOUBLE_EQ(static_cast<double>(z1.gradients), static_cast<double>(plain.gradients));
  l.zero_stage = 3;
  const MemoryEstimate z3 = estimate_memory(c, s, l);
  EXPECT_DOUBLE_EQ(static_cast<double>(z3.parameters), static_cast<double>(plain.parameters) / 4);
  EXPECT_DOUBLE_EQ(static_cast<double>(z3.gradients), static_cast<double>(plain.gradients) / 4);
  // Checkpointing keeps only each block's input; ZeRO-3 recomputes its units the same way.
  l.zero_stage = 0;
  l.checkpointing = true;
  const MemoryEstimate checkpointed = estimate_memory(c, s, l);
  EXPECT_LT(checkpointed.activations, plain.activations);
  EXPECT_DOUBLE_EQ(static_cast<double>(checkpointed.stages[0].activations),
                   static_cast<double>(z3.stages[0].activations));
  // GPT-2 small with micro-batch 8 × 1024 needs a few GiB, not more than a workstation has.
  EXPECT_GT(plain.total(), 1e9L);
  EXPECT_LT(plain.total(), 64e9L);
}

TEST(EstimateMemory, SizesNoMachineHoldsAreRefusedNamingTheKeys) {
  Config c;
  c.train.micro_batch_size = 2;
  c.train.seq_len = 16;
  const MemoryLayout l;
  // 2^62 positions × 16: would wrap around in 64 bits.
  const MemoryEstimate huge = estimate_memory(c, gpt(2, 16, 300, std::int64_t{1} << 62), l);
  EXPECT_GT(huge.total(), 1e19L);
  EXPECT_TRUE(std::isfinite(static_cast<double>(huge.total())));
  auto message = [&](const Config& cfg, const models::TransformerSpec& s) {
    try {
      check_memory_fits(cfg, s, l, 16e9L, "this host");
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("accepted");
  };
  EXPECT_NE(message(c, gpt(2, 16, 300, std::int64_t{1} << 62)).find("model.max_seq_len=4611686018427387904"),
            std::string::npos);
  EXPECT_NE(message(c, gpt(1000000000, 16, 300, 16)).find("model.n_layer=1000000000"), std::string::npos);
  Config big_batch = c;
  big_batch.train.micro_batch_size = 1000000000000;
  const std::string m = message(big_batch, gpt(2, 16, 300, 16));
  EXPECT_NE(m.find("train.micro_batch_size=1000000000000"), std::string::npos) << m;
  EXPECT_NE(m.find("but this host has 14.9 GiB"), std::string::npos) << m;
  EXPECT_EQ(message(c, gpt(2, 16, 300, 16)), "accepted");
  EXPECT_GT(host_memory_bytes(), 0);
}

TEST(Metrics, TruncateAfterKeepsTheStepsUpToTheCheckpoint) {
  const fs::path dir = scratch("metrics");
  const std::string path = (dir / "metrics.jsonl").string();
  {
    std::ofstream out(path);
    for (int s = 1; s <= 6; ++s) out << fmt::format("{{\"loss\":1.0,\"step\":{}}}\n", s);
    out << "{\"step\":4,\"val_loss\":2.0}\n"
        << "not json\n";
  }
  MetricsLogger log(path, "off", true);
  log.truncate_after(3);
  StepMetrics m;
  m.step = 4;
  log.log_step(m, true);
  log.finish();
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u) << fmt::format("{}", fmt::join(lines, "\n"));
  EXPECT_EQ(lines[0], "{\"loss\":1.0,\"step\":1}");
  EXPECT_EQ(lines[2], "{\"loss\":1.0,\"step\":3}");
  EXPECT_EQ(lines[3], "not json");
  EXPECT_NE(lines[4].find("\"step\":4"), std::string::npos);
  fs::remove_all(dir);
}

class MidStepStop : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = scratch("corpus");
    testing::make_corpus(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static TrainOptions options(const std::string& run, const std::vector<std::string>& extra) {
    TrainOptions o;
    o.overrides = testing::tiny_run(dir_, "cache");
    for (const char* s :
         {"train.micro_batch_size=1", "train.global_batch_size=64", "model.dropout=0.1", "checkpoint.interval=0"})
      o.overrides.emplace_back(s);
    o.overrides.insert(o.overrides.end(), extra.begin(), extra.end());
    o.run_dir = (dir_ / run).string();
    o.quiet = true;
    return o;
  }
  static inline fs::path dir_;
};

// A stop requested while a step of 64 micro-batches runs saves the state before that step; the resumed
// run then follows the uninterrupted one exactly.
TEST_F(MidStepStop, SavesTheStateBeforeTheStepAndResumesExactly) {
  const TrainSummary straight = train(options("straight", {"train.steps=4"}));
  ASSERT_EQ(straight.losses.size(), 4u);
  std::atomic<bool> done{false};
  // Once step 1's checkpoint is there (a stop during the set-up would save nothing, before step 1).
  const fs::path first = dir_ / "stopped" / "checkpoints" / "latest";
  std::thread stopper([&] {
    while (!done && !fs::exists(first))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    while (!done) {  // keep asking until train() returns
      request_stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  const TrainSummary stopped = train(options("stopped", {"train.steps=4", "checkpoint.interval=1"}));
  done = true;
  stopper.join();
  ASSERT_TRUE(stopped.interrupted);
  ASSERT_LT(stopped.steps_done, 4);
  EXPECT_EQ(stopped.losses.size(), static_cast<std::size_t>(stopped.steps_done));
  const checkpoint::CheckpointReader reader(stopped.last_checkpoint);
  EXPECT_EQ(reader.meta()["step"].get<std::int64_t>(), stopped.steps_done);
  EXPECT_EQ(reader.meta()["consumed_samples"].get<std::int64_t>(), stopped.steps_done * 64);
  TrainOptions again = options("stopped", {"train.steps=4"});
  again.resume = true;
  const TrainSummary resumed = train(again);
  ASSERT_EQ(resumed.losses.size(), static_cast<std::size_t>(4 - stopped.steps_done));
  for (std::size_t i = 0; i < resumed.losses.size(); ++i)
    EXPECT_EQ(resumed.losses[i], straight.losses[static_cast<std::size_t>(stopped.steps_done) + i]);
}

}  // namespace
}  // namespace trident::train
