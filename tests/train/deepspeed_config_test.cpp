// DeepSpeed's JSON config mapped onto trident's keys (docs/deepspeed.md).
#include "trident/train/config/deepspeed_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "testing/helpers.h"

#include "trident/core/error.h"
#include "trident/optim/schedule.h"
#include "trident/train/config/config.h"
#include "trident/train/setup.h"

namespace trident::train {
namespace {

const std::string kSeed = std::string(TRIDENT_DS_FIXTURES) + "/seed_003_ds_config.json";

std::vector<std::string> apply(Config& c, const std::string& text, std::int64_t dp = 1) {
  return apply_deepspeed_json(c, text, "ds.json", dp);
}
std::string error_of(const std::string& text, std::int64_t dp = 1) {
  Config c;
  return testing::error_message([&] { apply(c, text, dp); });
}
bool has_line(const std::vector<std::string>& lines, const std::string& line) {
  return std::find(lines.begin(), lines.end(), line) != lines.end();
}
std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// The seed article's file, comments and all, under the 4 GPUs it was written for.
TEST(DeepSpeedConfig, SeedFileVerbatim) {
  Config c;
  const auto lines = apply_deepspeed_file(c, kSeed, 4);
  EXPECT_EQ(c.train.global_batch_size, 4);
  EXPECT_EQ(c.train.micro_batch_size, 1);
  EXPECT_EQ(c.dist.zero_stage, 3);
  EXPECT_EQ(c.optim.name, "adamw");
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-4);
  EXPECT_EQ(c.optim.betas, (std::vector<double>{0.9, 0.999}));
  EXPECT_DOUBLE_EQ(c.optim.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optim.weight_decay, 0.0);  // DeepSpeed's default, not trident's 0.1
  EXPECT_TRUE(has_line(lines, kSeed + ": train_micro_batch_size_per_gpu 1 → train.micro_batch_size = 1"))
      << joined(lines);
  EXPECT_TRUE(has_line(lines, kSeed + ": zero_optimization.stage 3 → dist.zero_stage = 3")) << joined(lines);
  EXPECT_TRUE(has_line(lines, kSeed + ": optimizer.params.lr 0.0001 → optim.lr = 0.0001")) << joined(lines);
  EXPECT_TRUE(has_line(lines, kSeed + ": zero_allow_untested_optimizer true ignored (tunes or reports on "
                                      "DeepSpeed's internals)"))
      << joined(lines);
  // On one process the same file is DeepSpeed's batch error, in one line.
  Config one;
  const std::string msg = testing::error_message([&] { apply_deepspeed_file(one, kSeed, 1); });
  EXPECT_EQ(msg, kSeed + ": train_batch_size 4 != train_micro_batch_size_per_gpu 1 × gradient_accumulation_steps 1 × "
                         "1 data-parallel rank = 1; DeepSpeed requires them equal");
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST(DeepSpeedConfig, CommentsOfBothKinds) {
  Config c;
  apply(c, "/* a block\n comment */ {\n // a line comment\n \"train_micro_batch_size_per_gpu\": 3 /* inline */\n}");
  EXPECT_EQ(c.train.micro_batch_size, 3);
  EXPECT_NE(error_of("{\"train_micro_batch_size_per_gpu\": 3,,}").find("ds.json: invalid JSON: parse error"),
            std::string::npos);
}

TEST(DeepSpeedConfig, BatchAnyTwoGiveTheThird) {
  Config c;
  apply(c, R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 2);  // accum 4
  EXPECT_EQ(c.train.global_batch_size, 32);
  EXPECT_EQ(c.train.micro_batch_size, 4);
  c = Config{};
  auto lines = apply(c, R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", 2);  // micro 8
  EXPECT_EQ(c.train.micro_batch_size, 8);
  EXPECT_TRUE(has_line(lines, "ds.json: train_micro_batch_size_per_gpu (derived) 8 → train.micro_batch_size = 8"))
      << joined(lines);
  c = Config{};
  apply(c, R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3})", 4);  // train 24
  EXPECT_EQ(c.train.global_batch_size, 24);
  c = Config{};
  apply(c, R"({"train_batch_size": 8})", 2);  // one alone: no accumulation
  EXPECT_EQ(c.train.micro_batch_size, 4);
  EXPECT_EQ(c.train.global_batch_size, 8);
  c = Config{};
  apply(c, R"({"train_micro_batch_size_per_gpu": 5})", 2);
  EXPECT_EQ(c.train.global_batch_size, 10);
  // All three, consistent.
  c = Config{};
  apply(c, R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4})", 2);
  EXPECT_EQ(c.train.global_batch_size, 16);
  EXPECT_EQ(c.train.micro_batch_size, 2);
}

TEST(DeepSpeedConfig, BatchErrors) {
  EXPECT_EQ(error_of(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4})", 2),
            "ds.json: train_batch_size 10 != train_micro_batch_size_per_gpu 4 × gradient_accumulation_steps 1 × 2 "
            "data-parallel ranks = 8 (gradient_accumulation_steps derived as 10 / 4 / 2, rounded down); DeepSpeed "
            "requires them equal");
  EXPECT_EQ(error_of(R"({"train_batch_size": 2, "train_micro_batch_size_per_gpu": 4})", 1),
            "ds.json: train_batch_size 2 != train_micro_batch_size_per_gpu 4 × gradient_accumulation_steps 0 × 1 "
            "data-parallel rank = 0 (gradient_accumulation_steps derived as 2 / 4 / 1, rounded down); DeepSpeed "
            "requires them equal");
  EXPECT_EQ(error_of(R"({"gradient_accumulation_steps": 2})"),
            "ds.json: gradient_accumulation_steps 2 alone does not fix the batch: give train_batch_size or "
            "train_micro_batch_size_per_gpu too");
  EXPECT_EQ(error_of(R"({"train_micro_batch_size_per_gpu": 0})"),
            "ds.json: train_micro_batch_size_per_gpu must be a positive integer, got 0");
  EXPECT_EQ(error_of(R"({"train_batch_size": "eight"})"), "ds.json: train_batch_size must be an integer, got \"eight\"");
}

// Hugging Face's integration writes "auto": taken as unset.
TEST(DeepSpeedConfig, BatchAuto) {
  Config c;
  auto lines = apply(c, R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2,
                            "gradient_accumulation_steps": "auto"})", 3);
  EXPECT_EQ(c.train.micro_batch_size, 2);
  EXPECT_EQ(c.train.global_batch_size, 6);
  EXPECT_TRUE(has_line(lines, "ds.json: train_batch_size \"auto\": taken as unset")) << joined(lines);
  c = Config{};
  c.train.micro_batch_size = 7;
  lines = apply(c, R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"})");
  EXPECT_EQ(c.train.micro_batch_size, 7);
  EXPECT_EQ(c.train.global_batch_size, 0);
  c = Config{};
  apply(c, R"({"optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}}})");
  EXPECT_DOUBLE_EQ(c.optim.lr, Config{}.optim.lr);
  EXPECT_DOUBLE_EQ(c.optim.weight_decay, Config{}.optim.weight_decay);
}

TEST(DeepSpeedConfig, OptimizerAdamAndAdamW) {
  Config c;
  auto lines = apply(c, R"({"optimizer": {"type": "AdamW", "params": {"lr": 3e-5, "betas": [0.8, 0.95],
                            "eps": 1e-6, "weight_decay": 0.01}}})");
  EXPECT_EQ(c.optim.name, "adamw");
  EXPECT_DOUBLE_EQ(c.optim.lr, 3e-5);
  EXPECT_EQ(c.optim.betas, (std::vector<double>{0.8, 0.95}));
  EXPECT_DOUBLE_EQ(c.optim.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optim.weight_decay, 0.01);
  EXPECT_TRUE(has_line(lines, "ds.json: optimizer.params.weight_decay 0.01 → optim.weight_decay = 0.01"));
  // "Adam" is AdamW unless adam_w_mode is false (DeepSpeed's default is true).
  c = Config{};
  apply(c, R"({"optimizer": {"type": "Adam", "params": {"weight_decay": 0.1}}})");
  EXPECT_DOUBLE_EQ(c.optim.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-3);  // FusedAdam's default
  EXPECT_EQ(c.optim.betas, (std::vector<double>{0.9, 0.999}));
  c = Config{};
  EXPECT_NO_THROW(apply(c, R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})"));
  EXPECT_EQ(error_of(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "weight_decay": 0.1}}})"),
            "ds.json: 1 key cannot apply (nothing was run): optimizer.params.adam_w_mode false with weight_decay 0.1 "
            "(Adam with L2 regularization, which is not built: trident's AdamW decouples weight decay; set "
            "adam_w_mode true or weight_decay 0)");
  EXPECT_EQ(error_of(R"({"optimizer": {"type": "Lamb"}})"),
            "ds.json: 1 key cannot apply (nothing was run): optimizer.type \"Lamb\" is not built (trident's optimizer "
            "is AdamW (DeepSpeed's Adam and AdamW map onto it))");
  EXPECT_EQ(error_of(R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})"),
            "ds.json: 1 key cannot apply (nothing was run): optimizer.params.amsgrad true (not built: trident's AdamW "
            "has no AMSGrad variant)");
  // bias_correction false: DeepSpeed's FusedAdam without the 1 − beta^t corrections (BingBertSquad's configs).
  c = Config{};
  lines = apply(c, R"({"optimizer": {"type": "Adam", "params": {"lr": 3e-5, "bias_correction": false}}})");
  EXPECT_FALSE(c.optim.bias_correction);
  EXPECT_TRUE(has_line(lines, "ds.json: optimizer.params.bias_correction false → optim.bias_correction = false"))
      << joined(lines);
  c = Config{};
  apply(c, R"({"optimizer": {"type": "Adam", "params": {}}})");
  EXPECT_TRUE(c.optim.bias_correction);
  EXPECT_EQ(error_of(R"({"optimizer": {"type": "AdamW", "params": {"weight_decy": 0.1}}})"),
            "ds.json: unknown key optimizer.params.weight_decy (did you mean optimizer.params.weight_decay?)");
  EXPECT_NE(error_of(R"({"optimizer": {"type": "AdamW", "params": {"max_grad_norm": 1}}})").find("gradient_clipping"),
            std::string::npos);
}

TEST(DeepSpeedConfig, Schedulers) {
  Config c;
  auto lines = apply(c, R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 2e-4,
                            "warmup_num_steps": 50, "warmup_type": "linear"}}})");
  EXPECT_EQ(c.schedule.decay, "deepspeed_warmup");
  EXPECT_EQ(c.schedule.warmup_steps, 50);
  EXPECT_EQ(c.schedule.warmup_type, "linear");
  EXPECT_DOUBLE_EQ(c.optim.lr, 2e-4);
  EXPECT_TRUE(has_line(lines, "ds.json: scheduler.params.warmup_max_lr 0.0002 → optim.lr = 0.0002")) << joined(lines);
  // DeepSpeed's defaults: warmup_type log, 1000 steps, from 0, and WarmupLR's peak is the optimizer's lr.
  c = Config{};
  lines = apply(c, R"({"optimizer": {"type": "Adam", "params": {"lr": 0.00015}}, "scheduler": {"type": "WarmupLR"}})");
  EXPECT_EQ(c.schedule.warmup_type, "log");
  EXPECT_EQ(c.schedule.warmup_steps, 1000);
  EXPECT_DOUBLE_EQ(c.schedule.warmup_min_lr, 0.0);
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.00015);
  EXPECT_TRUE(has_line(lines, "ds.json: scheduler.params.warmup_type (absent) → schedule.warmup_type = 'log' "
                              "(DeepSpeed's default \"log\")"))
      << joined(lines);
  c = Config{};
  apply(c, R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.02, "warmup_max_lr": 0.05,
               "warmup_num_steps": 4, "total_num_steps": 8, "warmup_type": "linear"}}})");
  EXPECT_EQ(c.schedule.decay, "deepspeed_warmup_decay");
  EXPECT_EQ(c.schedule.decay_steps, 8);
  EXPECT_DOUBLE_EQ(c.schedule.warmup_min_lr, 0.02);
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.05);
  c = Config{};
  apply(c, R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 8}}})");
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.001);  // WarmupDecayLR's own default peak
  c = Config{};
  apply(c, R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
               "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 10, "total_num_steps": 100,
               "cos_min_ratio": 0.1, "warmup_min_ratio": 0.5}}})");
  EXPECT_EQ(c.schedule.decay, "deepspeed_warmup_cosine");
  EXPECT_EQ(c.schedule.decay_steps, 100);
  EXPECT_DOUBLE_EQ(c.schedule.min_lr, 1e-4);
  EXPECT_DOUBLE_EQ(c.schedule.warmup_min_lr, 5e-4);
  c = Config{};
  apply(c, R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3,
               "cycle_first_step_size": 4, "cycle_first_stair_count": 2, "decay_step_size": 4, "decay_lr_rate": 0.5,
               "cycle_min_mom": 0.85, "cycle_max_mom": 0.99}}})");
  EXPECT_EQ(c.schedule.decay, "deepspeed_one_cycle");
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.schedule.min_lr, 1e-4);
  EXPECT_EQ(c.schedule.cycle_second_step_size, 0);     // absent: the first's
  EXPECT_EQ(c.schedule.cycle_second_stair_count, -1);  // absent: the first's
  EXPECT_TRUE(c.schedule.cycle_momentum);              // OneCycle's default
  // DeepSpeed's own errors, and what is not built, all named in one line.
  EXPECT_EQ(error_of(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 0}}})"),
            "ds.json: 2 keys cannot apply (nothing was run): scheduler.params.warmup_num_steps 0 (DeepSpeed refuses it "
            "too: a positive integer is required); scheduler.params.total_num_steps absent (DeepSpeed's WarmupDecayLR "
            "requires it)");
  EXPECT_EQ(error_of(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_max_lr": 1e-3}}})"),
            "ds.json: 1 key cannot apply (nothing was run): scheduler.params.cycle_min_lr absent (DeepSpeed's "
            "OneCycle requires it)");
  EXPECT_EQ(error_of(R"({"scheduler": {"type": "StepLR", "params": {}}})"),
            "ds.json: 1 key cannot apply (nothing was run): scheduler.type \"StepLR\" (not built: trident builds "
            "DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle and LRRangeTest)");
  EXPECT_EQ(error_of(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_step": 10}}})"),
            "ds.json: unknown key scheduler.params.warmup_num_step (did you mean scheduler.params.warmup_num_steps?)");
}

// The learning rates against numbers computed by hand from DeepSpeed's formulas (deepspeed/runtime/
// lr_schedules.py, written out in docs/deepspeed.md): step k uses the scheduler's index k − 2, and step 1 its
// start value.
TEST(DeepSpeedConfig, SchedulesFollowDeepSpeedsFormulas) {
  const auto rates = [](const std::string& ds, const std::vector<std::int64_t>& steps) {
    Config c;
    apply(c, ds);
    const optim::ScheduleOptions o = detail::schedule_options(c);
    std::vector<double> out;
    for (std::int64_t k : steps) out.push_back(optim::learning_rate(o, k));
    return out;
  };
  const auto expect_near = [](const std::vector<double>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << "at " << i;
  };
  // WarmupLR, log warmup (the default) over 10 steps: ln(i + 1) / ln 10 of the way, i = k − 2.
  expect_near(rates(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 1e-3, "warmup_num_steps": 10}}})",
                    {1, 2, 3, 6, 11, 12, 13}),
              {0, 0, 0.00030102999566398113, 0.0006989700043360188, 0.001, 0.001, 0.001});
  // WarmupDecayLR from 0.02, linear, W 4, T 8: up to 0.05 at step 6, down to 0.02 at step 10.
  expect_near(rates(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.02, "warmup_max_lr": 0.05,
                       "warmup_num_steps": 4, "total_num_steps": 8, "warmup_type": "linear"}}})",
                    {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}),
              {0.02, 0.02, 0.0275, 0.035, 0.0425, 0.05, 0.0425, 0.035, 0.0275, 0.02, 0.02});
  // WarmupCosineLR, log warmup, W 10, T 20, the optimizer's lr 1.5e-4, cos_min_ratio 1e-4: step 1 is 0.
  expect_near(rates(R"({"optimizer": {"type": "Adam", "params": {"lr": 0.00015}},
                       "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 10, "total_num_steps": 20}}})",
                    {1, 2, 3, 11, 12, 13, 17, 21, 22, 30}),
              {0, 0, 4.515449934959717e-05, 0.00015, 0.0001463296057982643, 0.00013567770695066325,
               5.183354304933676e-05, 1.5e-08, 1.5e-08, 1.5e-08});
  // OneCycle with stairs and a decay after the cycle, and its momentum.
  const std::string one_cycle = R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4,
      "cycle_max_lr": 1e-3, "cycle_first_step_size": 4, "cycle_first_stair_count": 2, "decay_step_size": 4,
      "decay_lr_rate": 0.5, "cycle_min_mom": 0.85, "cycle_max_mom": 0.99}}})";
  expect_near(rates(one_cycle, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14}),
              {1e-4, 1e-4, 0.00055, 0.00055, 0.001, 0.00055, 0.00055, 1e-4, 1e-4, 8.888888888888889e-05, 8e-05,
               6.153846153846154e-05});
  Config c;
  apply(c, one_cycle);
  const optim::ScheduleOptions o = detail::schedule_options(c);
  const std::vector<double> beta1 = {0.85, 0.99, 0.92, 0.92, 0.85, 0.92, 0.92, 0.99, 0.99};
  for (std::int64_t k = 1; k <= 9; ++k) {
    const auto betas = optim::cycled_betas(o, k);
    ASSERT_TRUE(betas.has_value());
    EXPECT_NEAR(betas->first, beta1[static_cast<std::size_t>(k - 1)], 1e-15) << "step " << k;
    EXPECT_DOUBLE_EQ(betas->second, 0.99);  // DeepSpeed writes (momentum, 0.99) into the betas
  }
  // LRRangeTest: from lr_range_test_min_lr, (k − 1) / step_size of the way up by step_rate (stairs: rounded down).
  expect_near(rates(R"({"scheduler": {"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 0.01,
                       "lr_range_test_step_size": 4, "lr_range_test_step_rate": 2}}})",
                    {1, 2, 3, 5, 9}),
              {0.01, 0.015, 0.02, 0.03, 0.05});
  expect_near(rates(R"({"scheduler": {"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 0.01,
                       "lr_range_test_step_size": 4, "lr_range_test_step_rate": 2, "lr_range_test_staircase": true}}})",
                    {1, 2, 4, 5, 8, 9}),
              {0.01, 0.01, 0.01, 0.03, 0.03, 0.05});
  // Continuous (no stairs), asymmetric: up over 3, down over 5, then the floor.
  expect_near(rates(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0, "cycle_max_lr": 0.1,
                       "cycle_first_step_size": 3, "cycle_second_step_size": 5}}})",
                    {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}),
              {0.0, 0.03333333333333333, 0.06666666666666667, 0.1, 0.08000000000000002, 0.06, 0.04000000000000001,
               0.020000000000000004, 0.0, 0.0});
}

// No scheduler section: DeepSpeed keeps the optimizer's lr from the first step; no gradient_clipping:
// DeepSpeed's default (1.0 since v0.19.3). Either yields to what the TOML file or --set gave.
TEST(DeepSpeedConfig, AbsentSchedulerAndClippingMeanDeepSpeeds) {
  Config c;
  c.schedule.warmup_steps = 100;  // trident's values before the file: replaced
  c.optim.clip_grad = 0.3;
  auto lines = apply(c, R"({"optimizer": {"type": "AdamW", "params": {"lr": 2e-4}}})");
  EXPECT_EQ(c.schedule.decay, "constant");
  EXPECT_EQ(c.schedule.warmup_steps, 0);
  EXPECT_DOUBLE_EQ(c.optim.clip_grad, 1.0);
  const optim::ScheduleOptions o = detail::schedule_options(c);
  for (std::int64_t k : {1, 2, 50, 1000}) EXPECT_DOUBLE_EQ(optim::learning_rate(o, k), 2e-4) << k;
  EXPECT_TRUE(has_line(lines, "ds.json: scheduler absent → schedule.decay = \"constant\", schedule.warmup_steps = 0 "
                              "(DeepSpeed keeps the optimizer's lr, optim.lr = 0.0002)"))
      << joined(lines);
  // Keys the TOML file or --set gave stay.
  Config given;
  given.schedule.decay = "linear";
  given.optim.clip_grad = 0.0;
  lines = apply_deepspeed_json(given, "{}", "ds.json", 1, {"schedule.decay", "optim.clip_grad"});
  EXPECT_EQ(given.schedule.decay, "linear");
  EXPECT_DOUBLE_EQ(given.optim.clip_grad, 0.0);
  EXPECT_TRUE(has_line(lines, "ds.json: gradient_clipping absent: optim.clip_grad stays 0.0, as the TOML file or "
                              "--set gave it"))
      << joined(lines);
}

// Every key that cannot apply is named, in one line: a user fixes the file once.
TEST(DeepSpeedConfig, EveryRefusedKeyInOneMessage) {
  const std::string msg = error_of(R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": true}},
      "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}, "zero_quantized_weights": true},
      "gradient_allreduce_op": "sum", "fp16": {"enabled": true, "loss_scale": 128},
      "amp": {"enabled": true}})");
  EXPECT_EQ(msg, "ds.json: 6 keys cannot apply (nothing was run): optimizer.params.amsgrad true (not built: trident's "
                 "AdamW has no AMSGrad variant); zero_optimization.offload_param.device \"nvme\" (not built: trident "
                 "keeps the parameters in memory); zero_optimization.zero_quantized_weights true (not built by "
                 "trident's ZeRO); gradient_allreduce_op \"sum\" with ZeRO stage 3 (DeepSpeed refuses it too); "
                 "fp16.loss_scale 128 (a static scale: not built, trident's loss scale is dynamic, fp16.loss_scale 0); "
                 "amp enabled (NVIDIA Apex AMP is not built)");
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

// The keys of current DeepSpeed that carry a meaning for the run, and those that only tune DeepSpeed.
TEST(DeepSpeedConfig, CurrentKeys) {
  Config c;
  auto lines = apply(c, R"({"gradient_allreduce_op": "SUM", "zero_optimization": {"stage": 2},
                            "bfloat16": {"enabled": true, "loss_scale": 0, "check_grad_overflow": true,
                                         "bf16_master_weights_and_grads": false}})");
  EXPECT_EQ(c.dist.gradient_reduce, "sum");
  EXPECT_EQ(c.train.precision, "bf16");
  EXPECT_TRUE(c.optim.skip_nonfinite_steps);  // check_grad_overflow under ZeRO-2: a non-finite step is skipped
  EXPECT_TRUE(has_line(lines, "ds.json: bfloat16.loss_scale 0 ignored (bf16 runs without a loss scale; DeepSpeed "
                              "before 0.17.1 ignored the key too)"))
      << joined(lines);
  c = Config{};
  lines = apply(c, R"({"bf16": {"enabled": true, "check_grad_overflow": true}})");  // no ZeRO: DeepSpeed does not check
  EXPECT_FALSE(c.optim.skip_nonfinite_steps);
  EXPECT_TRUE(has_line(lines, "ds.json: bf16.check_grad_overflow true ignored (DeepSpeed checks bf16 gradients under "
                              "ZeRO 1 and 2 only; this file's stage 0 does not)"))
      << joined(lines);
  c = Config{};
  apply(c, R"({"zero_optimization": {"stage": 1}, "bf16": {"enabled": true, "check_grad_overflow": false}})");
  EXPECT_FALSE(c.optim.skip_nonfinite_steps);
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage": 1}, "bf16": {"enabled": true,
                         "bf16_master_weights_and_grads": true}})"),
            "ds.json: 1 key cannot apply (nothing was run): bf16.bf16_master_weights_and_grads true (not built: "
            "trident keeps fp32 master weights, gradients and optimizer state)");
  EXPECT_EQ(error_of(R"({"gradient_allreduce_op": "max"})"),
            "ds.json: gradient_allreduce_op must be \"mean\" or \"sum\", got \"max\"");
  // compute_grad_norm false: DeepSpeed's fast path, which it refuses with clipping (default 1.0) or ZeRO-3.
  c = Config{};
  lines = apply(c, R"({"gradient_clipping": 0, "zero_optimization": {"stage": 2, "compute_grad_norm": false}})");
  EXPECT_EQ(c.dist.zero_stage, 2);
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage": 2, "compute_grad_norm": false}})"),
            "ds.json: 1 key cannot apply (nothing was run): zero_optimization.compute_grad_norm false with gradient "
            "clipping at 1 (DeepSpeed refuses it too: clipping needs the norm)");
  EXPECT_EQ(error_of(R"({"gradient_clipping": 0, "zero_optimization": {"stage": 3, "compute_grad_norm": false}})"),
            "ds.json: 1 key cannot apply (nothing was run): zero_optimization.compute_grad_norm false with ZeRO stage 3 "
            "(DeepSpeed refuses it too: stages 1 and 2 only)");
  // A CPU offload: nothing changes on a CPU run (it is recorded for load_config's device check).
  c = Config{};
  lines = apply(c, R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true},
                        "cpu_offload_param": true}})");
  EXPECT_EQ(c.deepspeed_cpu_offload,
            (std::vector<std::string>{"zero_optimization.offload_optimizer.device \"cpu\"",
                                      "zero_optimization.cpu_offload_param true"}));
  EXPECT_TRUE(has_line(lines, "ds.json: zero_optimization.offload_optimizer.device \"cpu\": a no-op on a CPU run (the "
                              "optimizer state already lives in host memory); a GPU run refuses it"))
      << joined(lines);
}

TEST(DeepSpeedConfig, Fp16AndBf16) {
  Config c;
  auto lines = apply(c, R"({"fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12,
                            "loss_scale_window": 500, "hysteresis": 3, "min_loss_scale": 2}})");
  EXPECT_EQ(c.train.precision, "fp16");
  EXPECT_DOUBLE_EQ(c.optim.initial_loss_scale, 4096.0);
  EXPECT_EQ(c.optim.loss_scale_window, 500);
  EXPECT_EQ(c.optim.loss_scale_hysteresis, 3);
  EXPECT_DOUBLE_EQ(c.optim.min_loss_scale, 2.0);
  EXPECT_TRUE(has_line(lines, "ds.json: fp16.initial_scale_power 12 → optim.initial_loss_scale = 4096.0"))
      << joined(lines);
  c = Config{};
  apply(c, R"({"fp16": {"enabled": true}})");  // DeepSpeed's defaults
  EXPECT_DOUBLE_EQ(c.optim.initial_loss_scale, 65536.0);
  EXPECT_EQ(c.optim.loss_scale_window, 1000);
  EXPECT_EQ(c.optim.loss_scale_hysteresis, 2);
  EXPECT_DOUBLE_EQ(c.optim.min_loss_scale, 1.0);
  EXPECT_EQ(error_of(R"({"fp16": {"enabled": true, "loss_scale": 128}})"),
            "ds.json: 1 key cannot apply (nothing was run): fp16.loss_scale 128 (a static scale: not built, trident's "
            "loss scale is dynamic, fp16.loss_scale 0)");
  c = Config{};
  apply(c, R"({"bf16": {"enabled": true}})");
  EXPECT_EQ(c.train.precision, "bf16");
  EXPECT_EQ(error_of(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})"),
            "ds.json: fp16.enabled and bf16.enabled are both true: one precision, as DeepSpeed requires");
  c = Config{};
  apply(c, R"({"fp16": {"enabled": false, "loss_scale": 128}, "bf16": {"enabled": false}})");
  EXPECT_EQ(c.train.precision, "fp32");
}

TEST(DeepSpeedConfig, ClippingAndPrint) {
  Config c;
  auto lines = apply(c, R"({"gradient_clipping": 0.5, "steps_per_print": 7})");
  EXPECT_DOUBLE_EQ(c.optim.clip_grad, 0.5);
  // steps_per_print is DeepSpeed's own print: trident's log interval (and metrics.jsonl) stays.
  EXPECT_EQ(c.train.log_interval, Config{}.train.log_interval);
  EXPECT_TRUE(has_line(lines, "ds.json: gradient_clipping 0.5 → optim.clip_grad = 0.5"));
  EXPECT_TRUE(has_line(lines, "ds.json: steps_per_print 7 ignored (DeepSpeed's own progress print; trident logs every "
                              "train.log_interval = 10 steps, metrics.jsonl included)"))
      << joined(lines);
  EXPECT_EQ(error_of(R"({"gradient_clipping": -1})"),
            "ds.json: gradient_clipping: key 'optim.clip_grad' must be a finite number >= 0 (0 = off), got -1");
}

TEST(DeepSpeedConfig, IgnoredRefusedAndUnknownKeys) {
  Config c;
  auto lines = apply(c, R"({"wall_clock_breakdown": false, "zero_optimization": {"stage": 2, "overlap_comm": true,
                            "reduce_bucket_size": 5e8, "contiguous_gradients": true,
                            "offload_optimizer": {"device": "none"}}, "some_launcher_note": 1})");
  EXPECT_EQ(c.dist.zero_stage, 2);
  EXPECT_TRUE(has_line(lines, "ds.json: zero_optimization.overlap_comm true ignored (tunes DeepSpeed's buffers and "
                              "communication, not what is computed)"))
      << joined(lines);
  EXPECT_TRUE(has_line(lines, "ds.json: some_launcher_note ignored (not a DeepSpeed key trident knows)"));
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})"),
            "ds.json: 1 key cannot apply (nothing was run): zero_optimization.offload_param.device \"nvme\" (not "
            "built: trident keeps the parameters in memory)");
  EXPECT_EQ(error_of(R"({"zero_optimization": {"offload_param": {"device": "disk"}}})"),
            "ds.json: zero_optimization.offload_param.device must be \"none\", \"cpu\" or \"nvme\", got \"disk\"");
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage": 4}})"),
            "ds.json: zero_optimization.stage must be 0, 1, 2 or 3, got 4");
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stag": 1}})"),
            "ds.json: unknown key zero_optimization.stag (did you mean zero_optimization.stage?)");
  EXPECT_EQ(error_of(R"({"train_micro_batch_size_per_gpus": 2})"),
            "ds.json: unknown key train_micro_batch_size_per_gpus (did you mean train_micro_batch_size_per_gpu?)");
  EXPECT_EQ(error_of(R"({"amp": {"enabled": true}})"),
            "ds.json: 1 key cannot apply (nothing was run): amp enabled (NVIDIA Apex AMP is not built)");
  EXPECT_EQ(error_of(R"({"sparse_attention": {"mode": "strided"}})"),
            "ds.json: sparse_attention.mode \"strided\" is not one of dense, fixed, variable, bigbird, bslongformer");
  EXPECT_EQ(error_of(R"({"sparse_attention": {"num_local_block": 4}})"),
            "ds.json: unknown key sparse_attention.num_local_block (did you mean sparse_attention.num_local_blocks?)");
  EXPECT_EQ(error_of(R"({"train_batch_size": 4000000000000000000})"),
            "ds.json: train_batch_size 4000000000000000000 is more than any batch trident runs (2^40 samples)");
}

// DeepSpeed's sparse_attention section becomes model.sparse_attention.*: the keys DeepSpeed reads for the mode
// (absent: fixed), the others noted as dropped; sequence_parallel_size is DeepSpeed-Ulysses, context
// parallelism with the all-to-all, and the batch rule counts the data-parallel ranks without it.
TEST(DeepSpeedConfig, SparseAttentionAndUlysses) {
  Config c;
  auto lines = apply(c, R"({"sparse_attention": {"mode": "bigbird", "block": 32, "num_random_blocks": 2,
                                                "num_local_blocks": 8, "different_layout_per_head": true}})");
  EXPECT_EQ(c.model.sparse_attention.mode, "bigbird");
  EXPECT_EQ(c.model.sparse_attention.block, 32);
  EXPECT_EQ(c.model.sparse_attention.num_random_blocks, 2);
  EXPECT_TRUE(c.model.sparse_attention.different_layout_per_head);
  EXPECT_EQ(c.model.sparse_attention.num_local_blocks, 4) << "fixed's key, dropped for bigbird";
  EXPECT_TRUE(has_line(lines, "ds.json: sparse_attention.num_local_blocks 8 ignored (DeepSpeed does not read it for "
                              "mode bigbird)"))
      << joined(lines);
  Config fixed;
  apply(fixed, R"({"sparse_attention": {"local_window_blocks": [2, 4], "attention": "unidirectional"}})");
  EXPECT_EQ(fixed.model.sparse_attention.mode, "fixed");
  EXPECT_EQ(fixed.model.sparse_attention.attention, "unidirectional");
  EXPECT_EQ(fixed.model.sparse_attention.local_window_blocks, (std::vector<std::int64_t>{4}));
  Config ulysses;
  // 4 ranks: 2 data-parallel ones under Ulysses of 2, so 16 = 4 × 2 × 2.
  lines = apply(ulysses, R"({"sequence_parallel_size": 2, "train_batch_size": 16, "gradient_accumulation_steps": 2})",
                4);
  EXPECT_EQ(ulysses.dist.context_parallel_size, 2);
  EXPECT_EQ(ulysses.dist.context_parallel_algorithm, "all_to_all");
  EXPECT_EQ(ulysses.train.micro_batch_size, 4);
  EXPECT_EQ(error_of(R"({"sequence_parallel_size": 3})", 4),
            "ds.json: sequence_parallel_size 3 must divide the 4 data-parallel ranks of the job");
}

// DeepSpeed's TensorBoard monitor becomes log.tensorboard in its output_path/job_name (relative to the
// working directory, as DeepSpeed's); disabled it is a note; its keys are checked.
TEST(DeepSpeedConfig, TensorBoardMonitor) {
  Config c;
  auto lines = apply(c, R"({"tensorboard": {"enabled": true, "output_path": "logs/", "job_name": "bert"}})");
  const std::string expected = (std::filesystem::current_path() / "logs" / "bert").string();
  EXPECT_EQ(c.log.tensorboard, expected);
  EXPECT_TRUE(has_line(lines, "ds.json: tensorboard {\"enabled\":true,\"output_path\":\"logs/\",\"job_name\":\"bert\"} → "
                              "log.tensorboard = '" + expected + "' (trident's scalars, DeepSpeed's directory)"))
      << joined(lines);
  Config d;
  apply(d, R"({"tensorboard": {"enabled": true}})");
  EXPECT_EQ(d.log.tensorboard, (std::filesystem::current_path() / "DeepSpeedJobName").string());
  Config off;
  lines = apply(off, R"({"tensorboard": {"enabled": false, "output_path": "x"}})");
  EXPECT_TRUE(off.log.tensorboard.empty());
  EXPECT_EQ(error_of(R"({"tensorboard": {"enabled": true, "outpt_path": "x"}})"),
            "ds.json: unknown key tensorboard.outpt_path (did you mean tensorboard.output_path?)");
  EXPECT_EQ(error_of(R"({"tensorboard": {"enabled": true, "job_name": 3}})"),
            "ds.json: tensorboard.job_name must be a string, got 3");
}

// load_config: the TOML file, then the DeepSpeed config, then --set; the resolved config stands alone.
TEST(DeepSpeedConfig, LoadOrderAndResolvedConfig) {
  const auto dir = std::filesystem::temp_directory_path() / "trident_ds_config_test";
  std::filesystem::create_directories(dir);
  const std::string ds = (dir / "ds.json").string(), toml = (dir / "run.toml").string();
  std::ofstream(ds) << R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3,
                           "gradient_clipping": 0.25, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})";
  std::ofstream(toml) << "[train]\nmicro_batch_size = 8\ndeepspeed_config = \"" << ds << "\"\n[optim]\nclip_grad = 2.0\n";
  std::vector<std::string> notes;
  const Config c = load_config(toml, {"optim.lr=0.005"}, 2, &notes);
  EXPECT_EQ(c.train.micro_batch_size, 2);    // the DeepSpeed config over the TOML file
  EXPECT_EQ(c.train.global_batch_size, 12);  // 2 × 3 × 2 ranks
  EXPECT_DOUBLE_EQ(c.optim.clip_grad, 0.25);
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.005);       // --set over the DeepSpeed config
  EXPECT_TRUE(has_line(notes, ds + ": train_micro_batch_size_per_gpu 2 → train.micro_batch_size = 2"));
  // The one resolved line, last: no scheduler in the file → the optimizer's lr (here --set's), constant.
  EXPECT_EQ(notes.back(), ds + ": resolved: learning rate constant 0.005; gradients clipped to global norm 0.25");
  EXPECT_TRUE(c.train.deepspeed_config.empty());
  const std::string resolved = to_toml(c);
  Config back;
  apply_toml(back, resolved, "resolved");
  EXPECT_EQ(to_toml(back).substr(to_toml(back).find('[')), resolved.substr(resolved.find('[')));
  EXPECT_NE(resolved.find("# DeepSpeed config"), std::string::npos);
  // Data-parallel size from dist.tensor_parallel_size: 4 ranks, tp 2 → dp 2.
  std::ofstream(toml) << "[dist]\ntensor_parallel_size = 2\n";
  const Config tp = load_config(toml, {"train.deepspeed_config=\"" + ds + "\""}, 4, nullptr);
  EXPECT_EQ(tp.train.global_batch_size, 12);
  // A schedule the TOML file gives stays; a CPU offload is a no-op on the CPU and refused elsewhere.
  std::ofstream(ds) << R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2,
                           "offload_optimizer": {"device": "cpu"}}})";
  std::ofstream(toml) << "[schedule]\nwarmup_steps = 5\n";
  notes.clear();
  const Config kept = load_config(toml, {"train.deepspeed_config=\"" + ds + "\""}, 1, &notes);
  EXPECT_EQ(kept.schedule.decay, "cosine");
  EXPECT_EQ(kept.schedule.warmup_steps, 5);
  EXPECT_EQ(notes.back(), ds + ": resolved: learning rate trident's schedule.decay = \"cosine\" (peak 0.0003, 5 warmup "
                               "steps); gradients clipped to global norm 1");
  EXPECT_EQ(testing::error_message([&] {
              load_config(toml, {"train.deepspeed_config=\"" + ds + "\"", "train.device=cuda"}, 1, nullptr);
            }),
            ds + ": zero_optimization.offload_optimizer.device \"cpu\" cannot apply on a train.device = \"cuda\" run "
                 "(trident keeps everything on the training device; on a CPU run the offload changes nothing)");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trident::train
