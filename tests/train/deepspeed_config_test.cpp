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
            "ds.json: optimizer.params.adam_w_mode false with weight_decay 0.1 is Adam with L2 regularization, which "
            "is not built (trident's AdamW decouples weight decay): set adam_w_mode true or weight_decay 0");
  EXPECT_EQ(error_of(R"({"optimizer": {"type": "Lamb"}})"),
            "ds.json: optimizer.type \"Lamb\" is not built: trident's optimizer is AdamW (DeepSpeed's Adam and AdamW "
            "map onto it)");
  EXPECT_EQ(error_of(R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})"),
            "ds.json: optimizer.params.amsgrad true is not built (trident's AdamW has no AMSGrad variant)");
  EXPECT_EQ(error_of(R"({"optimizer": {"type": "AdamW", "params": {"weight_decy": 0.1}}})"),
            "ds.json: unknown key optimizer.params.weight_decy (did you mean optimizer.params.weight_decay?)");
  EXPECT_NE(error_of(R"({"optimizer": {"type": "AdamW", "params": {"max_grad_norm": 1}}})").find("gradient_clipping"),
            std::string::npos);
}

TEST(DeepSpeedConfig, Schedulers) {
  Config c;
  auto lines = apply(c, R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 2e-4,
                            "warmup_num_steps": 50, "warmup_type": "linear"}}})");
  EXPECT_EQ(c.schedule.decay, "constant");
  EXPECT_EQ(c.schedule.warmup_steps, 50);
  EXPECT_DOUBLE_EQ(c.optim.lr, 2e-4);
  EXPECT_TRUE(has_line(lines, "ds.json: scheduler.params.warmup_max_lr 0.0002 → optim.lr = 0.0002")) << joined(lines);
  c = Config{};
  apply(c, R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": 1e-3, "warmup_num_steps": 10,
               "total_num_steps": 500, "warmup_type": "linear"}}})");
  EXPECT_EQ(c.schedule.decay, "linear");
  EXPECT_EQ(c.schedule.decay_steps, 500);
  EXPECT_DOUBLE_EQ(c.schedule.min_lr, 0.0);
  c = Config{};
  apply(c, R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
               "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 10, "total_num_steps": 100,
               "cos_min_ratio": 0.1, "warmup_type": "linear"}}})");
  EXPECT_EQ(c.schedule.decay, "cosine");
  EXPECT_EQ(c.schedule.decay_steps, 100);
  EXPECT_DOUBLE_EQ(c.schedule.min_lr, 1e-4);
  // What trident's schedules cannot draw.
  EXPECT_EQ(error_of(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}})"),
            "ds.json: scheduler.params.warmup_type \"log\" (DeepSpeed's default, as the key is absent) is not built: "
            "trident's warmup is linear (set \"warmup_type\": \"linear\")");
  EXPECT_EQ(error_of(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-5, "warmup_type": "linear"}}})"),
            "ds.json: scheduler.params.warmup_min_lr 1e-05 is not built: trident's warmup starts from 0");
  EXPECT_NE(error_of(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0, "cycle_max_lr": 1e-3}}})")
                .find("ds.json: scheduler.type \"OneCycle\" is not built"),
            std::string::npos);
  EXPECT_EQ(error_of(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_type": "linear"}}})"),
            "ds.json: scheduler.params.total_num_steps is required by WarmupDecayLR");
  EXPECT_EQ(error_of(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_step": 10}}})"),
            "ds.json: unknown key scheduler.params.warmup_num_step (did you mean scheduler.params.warmup_num_steps?)");
}

// The mapped schedules against DeepSpeed's formulas, written out here from docs/deepspeed.md: DeepSpeed's
// optimizer step k uses its schedule at index k − 2. trident's step k is DeepSpeed's step k + 2 in the
// warmup and WarmupDecayLR's decay, k + 1 in WarmupCosineLR's decay (whose peak is one step of trident's).
TEST(DeepSpeedConfig, SchedulesFollowDeepSpeedsShapes) {
  const std::int64_t W = 10, T = 60;
  const double peak = 1e-3, cos_min = 0.1;
  const auto ds_warmup_decay = [&](std::int64_t i) {  // WarmupDecayLR, linear warmup from 0
    if (i < W) return peak * static_cast<double>(i) / W;
    return peak * std::max(0.0, static_cast<double>(T - i) / static_cast<double>(T - W));
  };
  const auto ds_cosine = [&](std::int64_t i) {  // WarmupCosineLR, linear warmup from 0
    if (i < W) return peak * static_cast<double>(i) / W;
    const double r = (1 + std::cos(std::numbers::pi * static_cast<double>(i - W + 1) / static_cast<double>(T - W))) / 2;
    return peak * std::max(0.0, cos_min + (1 - cos_min) * r);
  };
  Config c;
  apply(c, R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": 1e-3, "warmup_num_steps": 10,
               "total_num_steps": 60, "warmup_type": "linear"}}})");
  optim::ScheduleOptions o = detail::schedule_options(c);
  for (std::int64_t k = 1; k <= T + 5; ++k) {
    EXPECT_NEAR(optim::learning_rate(o, k), ds_warmup_decay(k), 1e-15) << "step " << k;  // = DeepSpeed's step k + 2
  }
  c = Config{};
  apply(c, R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
               "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 10, "total_num_steps": 60,
               "cos_min_ratio": 0.1, "warmup_type": "linear"}}})");
  o = detail::schedule_options(c);
  for (std::int64_t k = 1; k < W; ++k) EXPECT_NEAR(optim::learning_rate(o, k), ds_cosine(k), 1e-15) << k;
  EXPECT_DOUBLE_EQ(optim::learning_rate(o, W), peak);  // a step at the peak, which DeepSpeed's cosine skips
  for (std::int64_t k = W + 1; k <= T; ++k) {
    EXPECT_NEAR(optim::learning_rate(o, k), ds_cosine(k - 1), 1e-15) << "step " << k;  // DeepSpeed's step k + 1
  }
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
            "ds.json: fp16.loss_scale 128 (a static scale) is not built: trident's loss scale is dynamic "
            "(fp16.loss_scale 0)");
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
  EXPECT_EQ(c.train.log_interval, 7);
  EXPECT_TRUE(has_line(lines, "ds.json: gradient_clipping 0.5 → optim.clip_grad = 0.5"));
  EXPECT_TRUE(has_line(lines, "ds.json: steps_per_print 7 → train.log_interval = 7"));
  EXPECT_EQ(error_of(R"({"steps_per_print": 0})"),
            "ds.json: steps_per_print: key 'train.log_interval' must be positive, got 0");
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
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})"),
            "ds.json: zero_optimization.offload_optimizer {\"device\":\"cpu\"} is not built: trident keeps the "
            "optimizer state on the training device");
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})"),
            "ds.json: zero_optimization.offload_param {\"device\":\"nvme\"} is not built: trident keeps the "
            "parameters on the training device");
  EXPECT_EQ(error_of(R"({"activation_checkpointing": {"cpu_checkpointing": true}})"),
            "ds.json: activation_checkpointing.cpu_checkpointing true is not built: trident keeps checkpointed "
            "activations on the training device");
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage": 4}})"),
            "ds.json: zero_optimization.stage must be 0, 1, 2 or 3, got 4");
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stag": 1}})"),
            "ds.json: unknown key zero_optimization.stag (did you mean zero_optimization.stage?)");
  EXPECT_EQ(error_of(R"({"train_micro_batch_size_per_gpus": 2})"),
            "ds.json: unknown key train_micro_batch_size_per_gpus (did you mean train_micro_batch_size_per_gpu?)");
  EXPECT_EQ(error_of(R"({"amp": {"enabled": true}})"), "ds.json: amp is enabled: NVIDIA Apex AMP is not built");
  EXPECT_EQ(error_of(R"({"amp": {"enabled": false}, "sparse_attention": {"mode": "fixed"}})"),
            "ds.json: sparse_attention is enabled: sparse attention is not built");
  EXPECT_EQ(error_of(R"({"train_batch_size": 4000000000000000000})"),
            "ds.json: train_batch_size 4000000000000000000 is more than any batch trident runs (2^40 samples)");
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
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trident::train
