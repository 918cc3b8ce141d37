// The pieces train::train is made of, each on its own: the stop policy's
// decisions from given inputs, one step of a built run against train's first
// step (the same loss and parameters, bit for bit), and an evaluation against
// train's step-0 validation loss.
#include <gtest/gtest.h>

#include <filesystem>

#include "corpus_suite.h"
#include "trident/checkpoint/sharded.h"
#include "trident/dist/self_communicator.h"
#include "trident/train/best_checkpoints.h"
#include "trident/train/evaluate.h"
#include "trident/train/run.h"
#include "trident/train/step.h"
#include "trident/train/stop_policy.h"
#include "trident/train/trainer.h"

namespace trident::train {
namespace {

namespace fs = std::filesystem;
using namespace detail;

TEST(StopPolicy, ReasonFromInputs) {
  EXPECT_EQ(stop_reason(false, 10.0, 0.0), StopReason::none);  // no time limit
  EXPECT_EQ(stop_reason(true, 10.0, 0.0), StopReason::signal);
  EXPECT_EQ(stop_reason(false, 4.9, 5.0), StopReason::none);
  EXPECT_EQ(stop_reason(false, 5.0, 5.0), StopReason::time_limit);
  EXPECT_EQ(stop_reason(true, 6.0, 5.0), StopReason::time_limit);  // the time limit outranks a signal
  EXPECT_EQ(stop_reason(true, 1.0, 5.0), StopReason::signal);
  // Early stopping finishes the run: it outranks the time limit and a signal.
  EXPECT_EQ(stop_reason(true, 6.0, 5.0, true), StopReason::early_stopping);
  EXPECT_EQ(stop_reason(false, 1.0, 0.0, false, true), StopReason::requested);  // a callback's request
  EXPECT_EQ(stop_reason(true, 1.0, 0.0, false, true), StopReason::signal);      // a signal outranks it
}

// Issue 48: the best step by min_delta's rule (step 2) is one keep_best pruned for a later step a little
// lower (step 4, better by less than min_delta): the early-stopping line names the checkpoint that is kept.
TEST(StopPolicy, EarlyStoppingNamesTheBestCheckpointKept) {
  Config c;
  c.checkpoint.keep_best = 1;
  c.train.early_stopping_patience = 2;
  c.train.early_stopping_min_delta = 0.1;
  MonitorState m;
  observe(m, c, 2, 3.0);
  observe(m, c, 4, 2.95);
  observe(m, c, 6, 2.99);
  ASSERT_TRUE(patience_exhausted(m, c));
  EXPECT_EQ(early_stop_message(m, c, 6),
            "stopped after step 6: val loss has not improved by more than 0.1 for 2 evaluations (best 3.0000 at step "
            "2; its checkpoint is not among the checkpoint.keep_best=1 kept, the best of which is step 4 (val loss "
            "2.9500: checkpoints/best))");
  c.checkpoint.keep_best = 0;  // nothing pruned: the line as before
  MonitorState plain;
  observe(plain, c, 2, 3.0);
  EXPECT_EQ(early_stop_message(plain, c, 2).find("keep_best"), std::string::npos);
}

TEST(StopPolicy, AgreementKeepsTheLargestReason) {
  auto self = dist::self_communicator();
  for (StopReason r : {StopReason::none, StopReason::requested, StopReason::signal, StopReason::time_limit,
                       StopReason::early_stopping}) {
    EXPECT_EQ(agree_stop(*self, r), r);
  }
}

TEST(StopPolicy, StepLimitRequestsAndTime) {
  auto self = dist::self_communicator();
  request_stop();  // before the policy: cleared when it starts
  {
    StopPolicy policy(*self, 3, 0.0, StopPolicy::Clock::now());
    EXPECT_FALSE(stop_requested());
    EXPECT_FALSE(policy.reached_step_limit(2));
    EXPECT_TRUE(policy.reached_step_limit(3));
    EXPECT_FALSE(policy.signalled());
    EXPECT_EQ(policy.after_step(), StopReason::none);
    request_stop();
    EXPECT_TRUE(policy.signalled());
    EXPECT_EQ(policy.after_step(), StopReason::signal);
  }
  // A job that started an hour ago with a one-minute limit.
  StopPolicy late(*self, 3, 1.0, StopPolicy::Clock::now() - std::chrono::hours(1));
  EXPECT_EQ(late.after_step(), StopReason::time_limit);
  EXPECT_FALSE(late.signalled());  // between micro-batches only signals count
}

class Pieces : public testing::CorpusSuite<Pieces> {
 public:
  static constexpr const char* kDir = "pieces";

 protected:
  // The runs share one data cache and train on this process alone.
  static TrainOptions options(const std::string& run, const std::vector<std::string>& extra) {
    TrainOptions o = options_with_cache(run, "cache", extra);
    o.world = dist::self_communicator();
    return o;
  }
};
using testing::model_values;

// Accumulation over two micro-batches and dropout: the step's forward contexts and label count matter.
const std::vector<std::string> kStep = {"train.steps=1", "train.micro_batch_size=2", "train.global_batch_size=4",
                                        "model.dropout=0.1", "data.eod_mask_loss=true"};

TEST_F(Pieces, OneStepIsTrainsFirstStep) {
  const TrainSummary whole = train(options("step-train", kStep));
  ASSERT_EQ(whole.losses.size(), 1u);

  const std::unique_ptr<detail::Run> run = build_run(options("step-piece", kStep));
  EXPECT_EQ(run->accum, 2);
  EXPECT_EQ(run->state.step, 0);
  const std::optional<StepResult> r = train_step(*run);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->loss, whole.losses[0]);
  EXPECT_FALSE(r->skipped);
  EXPECT_GT(r->grad_norm, 0);
  EXPECT_EQ(run->state.step, 1);
  EXPECT_EQ(run->state.consumed_samples, 4);
  EXPECT_EQ(run->par.optimizer->steps_taken(), 1);
  EXPECT_EQ(model_values(run->save_checkpoint()), model_values(whole.last_checkpoint));
}

TEST_F(Pieces, AStepStoppedBeforeItsSecondMicroBatchChangesNothing) {
  const std::unique_ptr<detail::Run> run = build_run(options("step-stopped", kStep));
  const std::vector<double> before = model_values(run->save_checkpoint());
  std::vector<std::int64_t> asked;
  const auto stop = [&asked](std::int64_t m) {
    asked.push_back(m);
    return true;
  };
  EXPECT_FALSE(train_step(*run, stop).has_value());
  EXPECT_EQ(asked, std::vector<std::int64_t>{1});
  EXPECT_EQ(run->state.step, 0);
  EXPECT_EQ(run->state.consumed_samples, 0);
  EXPECT_EQ(run->par.optimizer->steps_taken(), 0);
  EXPECT_EQ(model_values(run->save_checkpoint()), before);
}

TEST_F(Pieces, EvaluationIsTrainsStepZeroValidationLoss) {
  const std::vector<std::string> eval = {"train.steps=1", "train.eval_interval=1", "train.eval_steps=2",
                                         "train.micro_batch_size=2", "train.global_batch_size=4"};
  const TrainSummary whole = train(options("eval-train", eval));
  ASSERT_GE(whole.val_losses.size(), 1u);
  ASSERT_EQ(whole.val_losses.front().first, 0);

  const std::unique_ptr<detail::Run> run = build_run(options("eval-piece", eval));
  Evaluator evaluator(*run);
  EXPECT_EQ(evaluator.micro_batches(), 4);  // 2 global batches of 2 micro-batches
  const double first = *evaluator.evaluate();
  EXPECT_EQ(first, whole.val_losses.front().second);
  EXPECT_EQ(*evaluator.evaluate(), first);  // the same samples every time, no dropout
  EXPECT_TRUE(std::isfinite(first));
  EXPECT_GT(first, 0);
}

}  // namespace
}  // namespace trident::train
