// End-to-end training on a small synthetic corpus in the built-in corpus's
// format (byte-level BPE tokenizer.json + Megatron .bin/.idx).
#include "trident/train/trainer.h"
#include "testing/helpers.h"

#include <gtest/gtest.h>
#include <pty.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "corpus_suite.h"
#include "trident/checkpoint/sharded.h"
#include "trident/data/dataset/blended_dataset.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/loader.h"
#include "trident/models/hf.h"
#include "trident/train/log/metrics.h"
#include "trident/train/setup.h"

namespace trident::train {
namespace {

namespace fs = std::filesystem;

class Trainer : public testing::CorpusSuite<Trainer> {
 public:
  static constexpr const char* kDir = "trainer";

 protected:
  static std::vector<double> final_params(const TrainSummary& s) { return testing::model_values(s.last_checkpoint); }
  // Trains `common` (train.steps = `steps`) straight through as run `name`, then again resumed from
  // its checkpoint at step `at`: the resumed run must follow bit-identically (losses, the last
  // validation loss when there is one, the final parameters).
  static void expect_exact_resume(const std::string& name, const std::vector<std::string>& common, std::size_t at,
                                  std::size_t steps) {
    const TrainSummary full = train(options(name + "-straight", common));
    ASSERT_EQ(full.losses.size(), steps);
    auto resumed_opts = options(name + "-resumed", common);
    resumed_opts.overrides.push_back(
        fmt::format("checkpoint.resume={}",
                    (dir_ / (name + "-straight") / "checkpoints" / fmt::format("step_{:08d}", at)).string()));
    const TrainSummary resumed = train(resumed_opts);
    ASSERT_EQ(resumed.losses.size(), steps - at);
    for (std::size_t i = 0; i < steps - at; ++i)
      EXPECT_EQ(resumed.losses[i], full.losses[at + i]) << "step " << at + i + 1;
    ASSERT_EQ(resumed.val_losses.empty(), full.val_losses.empty());
    if (!full.val_losses.empty()) {
      EXPECT_EQ(resumed.val_losses.back(), full.val_losses.back());
    }
    EXPECT_EQ(final_params(resumed), final_params(full));
  }
};

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(1e-3, std::fabs(b[i])));
  }
  return worst;
}

// micro-batch 2 × 4 accumulation steps = micro-batch 8 × 1 (fp32, dropout on).
TEST_F(Trainer, GradientAccumulationIsEquivalent) {
  const std::vector<std::string> common = {"train.steps=10", "model.dropout=0.1", "train.global_batch_size=8"};
  auto a = options("accum1", common);
  a.overrides.push_back("train.micro_batch_size=8");
  auto b = options("accum4", common);
  b.overrides.push_back("train.micro_batch_size=2");
  const TrainSummary sa = train(a), sb = train(b);
  ASSERT_EQ(sa.losses.size(), 10u);
  ASSERT_EQ(sb.losses.size(), 10u);
  EXPECT_LE(max_rel(sb.losses, sa.losses), 1e-6);
  const auto pa = final_params(sa), pb = final_params(sb);
  ASSERT_EQ(pa.size(), pb.size());
  EXPECT_LE(testing::rel_err(pb, pa), 1e-6);
}

TEST_F(Trainer, ValidationLossFallsByAThird) {
  auto o = options("falls", {"train.steps=300", "train.micro_batch_size=8", "train.eval_interval=300",
                             "train.eval_steps=4", "optim.weight_decay=0.0"});
  const TrainSummary s = train(o);
  ASSERT_GE(s.val_losses.size(), 2u);
  const double first = s.val_losses.front().second, last = s.val_losses.back().second;
  EXPECT_LE(last, 0.7 * first) << "val loss " << first << " -> " << last;
}

// A mixture-of-experts run logs its auxiliary loss (part of the loss), each layer's token-load
// imbalance and the fraction of assignments the capacity dropped, in the progress line's values.
TEST_F(Trainer, MixtureOfExpertsMetricsAreLogged) {
  auto o = options("moe-metrics", {"train.steps=2", "train.log_interval=1", "log.progress=off", "model.arch=mixtral",
                                   "model.n_kv_head=2", "model.d_ff=32", "model.n_experts=4",
                                   "model.experts_per_token=2", "model.moe_aux_loss_coef=0.01",
                                   "model.moe_capacity_factor=1.0"});
  o.quiet = false;  // metrics.jsonl is written by the logger
  const TrainSummary s = train(o);
  std::ifstream in(fs::path(o.run_dir) / "metrics.jsonl");
  std::vector<nlohmann::json> steps;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) steps.push_back(j);
  }
  ASSERT_EQ(steps.size(), 2u);
  for (const auto& j : steps) {
    // 2 layers × coefficient 0.01 × k 2 × E·Σ f·P, whose minimum (perfect balance) is 1.
    EXPECT_GE(j.at("aux_loss").get<double>(), 0.04 - 1e-9);
    EXPECT_LT(j.at("aux_loss").get<double>(), j.at("loss").get<double>());
    const auto imbalance = j.at("moe_load_imbalance").get<std::vector<double>>();
    ASSERT_EQ(imbalance.size(), 2u);  // one value per MoE layer
    for (double v : imbalance) EXPECT_GE(v, 1.0);
    const double dropped = j.at("moe_dropped_fraction").get<double>();
    EXPECT_GE(dropped, 0.0);
    EXPECT_LT(dropped, 1.0);
  }
  EXPECT_EQ(steps.back().at("loss").get<double>(), s.losses.back());
}

TEST_F(Trainer, ResumeContinuesBitIdentically) {
  expect_exact_resume(
      "plain",
      {"train.steps=8", "train.micro_batch_size=4", "model.dropout=0.1", "checkpoint.interval=4", "checkpoint.keep=5"},
      4, 8);
}

// model.make_vocab_size_divisible_by pads the vocabulary tables (aligned GEMM shapes) without changing
// the model: the same losses and final weights with no padding (1), the default (128) and an odd
// multiple, checkpoints of the real rows alone, and a padded run's checkpoint resumed unpadded.
TEST_F(Trainer, VocabularyPaddingChangesNothing) {
  const std::vector<std::string> common = {"train.steps=8", "train.micro_batch_size=4", "model.dropout=0.1",
                                           "checkpoint.interval=4", "checkpoint.keep=5"};
  auto with = [&](const std::string& run, const std::string& multiple) {
    auto o = options(run, common);
    o.overrides.push_back("model.make_vocab_size_divisible_by=" + multiple);
    return o;
  };
  const TrainSummary plain = train(with("pad1", "1")), padded = train(with("pad128", "128")),
                     odd = train(with("pad100", "100"));
  ASSERT_EQ(plain.losses.size(), 8u);
  for (const TrainSummary* s : {&padded, &odd}) {
    ASSERT_EQ(s->losses.size(), 8u);
    EXPECT_LE(max_rel(s->losses, plain.losses), 1e-6);
    const auto p = final_params(*s), q = final_params(plain);
    ASSERT_EQ(p.size(), q.size());  // the checkpoints hold the real rows only
    EXPECT_LE(testing::rel_err(p, q), 1e-6);  // as a whole: Adam amplifies rounding in weights near zero
  }
  auto resumed = with("pad128-resumed-unpadded", "1");
  resumed.overrides.push_back(
      "checkpoint.resume=" + (dir_ / "pad128" / "checkpoints" / fmt::format("step_{:08d}", 4)).string());
  const TrainSummary r = train(resumed);
  ASSERT_EQ(r.losses.size(), 4u);
  EXPECT_LE(max_rel(r.losses, std::vector<double>(padded.losses.begin() + 4, padded.losses.end())), 1e-6);
  // A multiple below 1 is a config error naming the key.
  EXPECT_THROW(train(with("pad0", "0")), Error);
}

// With data.eod_mask_loss a step's divisor is counted from the data source at the resumed position, so a
// resumed run still follows the uninterrupted one exactly (accumulation 4: micro-batches of unequal counts).
TEST_F(Trainer, ResumeWithEodMaskLossContinuesBitIdentically) {
  expect_exact_resume(
      "eod",
      {"train.steps=6", "train.micro_batch_size=2", "train.global_batch_size=8", "data.eod_mask_loss=true",
       "checkpoint.interval=3", "train.eval_interval=3", "model.dropout=0.1"},
      3, 6);
}

// train.exit_duration_minutes (Megatron's --exit-duration-in-mins, for a job's time limit): the first
// step already passes 0.0001 minutes, so the run saves a checkpoint after it and stops, and --resume goes on.
TEST_F(Trainer, ExitDurationSavesAndStops) {
  const TrainSummary s =
      train(options("exit", {"train.steps=50", "train.exit_duration_minutes=0.0001", "checkpoint.interval=0"}));
  EXPECT_TRUE(s.interrupted);
  EXPECT_EQ(s.steps_done, 1);
  EXPECT_TRUE(s.last_checkpoint.ends_with("step_00000001")) << s.last_checkpoint;
  auto more = options("exit", {"train.steps=3", "checkpoint.resume=auto"});
  const TrainSummary resumed = train(more);
  EXPECT_FALSE(resumed.interrupted);
  EXPECT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(resumed.steps_done, 3);
}

// --- checkpoint.keep_best and early stopping (Lightning's ModelCheckpoint(save_top_k) and EarlyStopping).
// A run at a high constant learning rate, evaluated after every step, whose validation loss goes up and
// down; the tests predict from its val losses which checkpoints are kept and where a run stops.
const std::vector<std::string> kBouncing = {"train.steps=12",         "train.micro_batch_size=2",
                                            "train.eval_interval=1",  "train.eval_steps=1",
                                            "schedule.decay=constant", "optim.lr=5e-2",
                                            "checkpoint.interval=0"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// (val loss, step) of the evaluations after a step, the lowest k, ties to the earlier step.
std::vector<std::int64_t> predicted_best(const TrainSummary& ref, std::size_t k) {
  std::vector<std::pair<double, std::int64_t>> all;
  for (const auto& [step, v] : ref.val_losses)
    if (step > 0) all.emplace_back(v, step);
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> steps;
  for (std::size_t i = 0; i < std::min(k, all.size()); ++i) steps.push_back(all[i].second);
  return steps;
}

struct PredictedStop {
  std::int64_t step = 0;  // 0: never stops
  std::int64_t best_step = 0;
  double best = 0;
};

// EarlyStopping's rule: an improvement is v < best - min_delta; `patience` evaluations without one stop.
PredictedStop predicted_stop(const TrainSummary& ref, std::int64_t patience, double min_delta, std::int64_t steps) {
  PredictedStop p;
  bool any = false;
  std::int64_t waited = 0;
  for (const auto& [step, v] : ref.val_losses) {
    if (step == 0) continue;
    if (!any || v < p.best - min_delta) {
      any = true, p.best = v, p.best_step = step, waited = 0;
    } else if (++waited >= patience && step < steps) {
      p.step = step;
      return p;
    }
  }
  return p;
}

std::set<std::string> checkpoint_names(const fs::path& run) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(run / "checkpoints"))
    if (e.is_directory()) names.insert(e.path().filename().string());
  return names;
}

std::string pointer(const fs::path& run, const char* name) {
  std::ifstream in(run / "checkpoints" / name);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string step_name(std::int64_t step) { return fmt::format("step_{:08d}", step); }

// keep_best=3 beside keep=1: exactly the newest checkpoint and the three of the lowest val loss survive, and
// `best` names the lowest; the kept list is in the newest meta.json. Saving does not change the training.
TEST_F(Trainer, KeepBestKeepsTheCheckpointsOfTheLowestValidationLoss) {
  const TrainSummary ref = train(options("bk-ref", kBouncing));
  ASSERT_EQ(ref.val_losses.size(), 13u);
  int rises = 0;
  for (std::size_t i = 2; i < ref.val_losses.size(); ++i) rises += ref.val_losses[i].second > ref.val_losses[i - 1].second;
  ASSERT_GE(rises, 2) << "the validation loss must go up and down for this test to mean anything";

  const TrainSummary s = train(options("bk", with(kBouncing, {"checkpoint.keep_best=3", "checkpoint.keep=1"})));
  EXPECT_EQ(s.val_losses, ref.val_losses);
  const std::vector<std::int64_t> best = predicted_best(ref, 3);
  std::set<std::string> want = {step_name(12)};
  for (std::int64_t step : best) want.insert(step_name(step));
  EXPECT_EQ(checkpoint_names(dir_ / "bk"), want);
  EXPECT_EQ(pointer(dir_ / "bk", "best"), step_name(best[0]));
  EXPECT_EQ(pointer(dir_ / "bk", "latest"), step_name(12));
  const auto meta = checkpoint::CheckpointReader(s.last_checkpoint).meta();
  ASSERT_EQ(meta["monitor"]["best_checkpoints"].size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(meta["monitor"]["best_checkpoints"][i]["step"], best[i]);
}

// Patience 2 (min_delta 0) and patience 1 with a min_delta: the run stops at the step the val losses
// predict, with a checkpoint there and the line saying why; not an interruption (exit status 0).
TEST_F(Trainer, EarlyStoppingStopsAtThePredictedStepWithTheLine) {
  const TrainSummary ref = train(options("es-ref", kBouncing));
  for (const auto& [patience, delta] : {std::pair<std::int64_t, double>{2, 0.0}, {1, 0.05}}) {
    const PredictedStop want = predicted_stop(ref, patience, delta, 12);
    ASSERT_GT(want.step, 0) << "patience " << patience << ": the reference never stops early";
    const std::string name = fmt::format("es-{}", patience);
    auto o = options(name, with(kBouncing, {fmt::format("train.early_stopping_patience={}", patience),
                                            fmt::format("train.early_stopping_min_delta={}", delta)}));
    o.quiet = false;
    ::testing::internal::CaptureStdout();
    const TrainSummary s = train(o);
    const std::string out = ::testing::internal::GetCapturedStdout();
    EXPECT_EQ(s.steps_done, want.step);
    EXPECT_EQ(s.stopped, StopCause::early_stopping);
    EXPECT_FALSE(s.interrupted);
    EXPECT_TRUE(s.last_checkpoint.ends_with(step_name(want.step))) << s.last_checkpoint;
    const std::string line =
        fmt::format("stopped after step {}: val loss has not improved by more than {} for {} evaluations (best {:.4f} "
                    "at step {})",
                    want.step, delta, patience, want.best, want.best_step);
    EXPECT_NE(out.find(line), std::string::npos) << "expected: " << line << "\noutput:\n" << out;
    // Resumed, the run is still stopped: it says so and takes no step.
    auto again = options(name, with(kBouncing, {fmt::format("train.early_stopping_patience={}", patience),
                                                fmt::format("train.early_stopping_min_delta={}", delta),
                                                "checkpoint.resume=auto"}));
    const TrainSummary resumed = train(again);
    EXPECT_EQ(resumed.stopped, StopCause::early_stopping);
    EXPECT_TRUE(resumed.losses.empty());
  }
}

// Stopped at step 4 (train.steps=4, a constant schedule, so the first 4 steps are those of the full run) and
// resumed with checkpoint.resume=auto: the same checkpoints are kept, `best` names the same one, the run
// stops at the same step with the same monitor state, and the losses continue bit for bit.
TEST_F(Trainer, ResumeInTheMiddleKeepsTheSameBestAndStopsAtTheSameStep) {
  const std::vector<std::string> cfg =
      with(kBouncing, {"checkpoint.keep_best=2", "checkpoint.keep=1", "train.early_stopping_patience=3"});
  const TrainSummary full = train(options("mid-full", cfg));
  ASSERT_EQ(full.stopped, StopCause::early_stopping);
  ASSERT_GT(full.steps_done, 4);
  const TrainSummary first = train(options("mid-split", with(cfg, {"train.steps=4"})));
  ASSERT_EQ(first.steps_done, 4);
  const TrainSummary rest = train(options("mid-split", with(cfg, {"checkpoint.resume=auto"})));
  EXPECT_EQ(rest.steps_done, full.steps_done);
  EXPECT_EQ(rest.stopped, full.stopped);
  ASSERT_EQ(rest.losses.size(), full.losses.size() - 4);
  for (std::size_t i = 0; i < rest.losses.size(); ++i) EXPECT_EQ(rest.losses[i], full.losses[4 + i]);
  EXPECT_EQ(checkpoint_names(dir_ / "mid-split"), checkpoint_names(dir_ / "mid-full"));
  EXPECT_EQ(pointer(dir_ / "mid-split", "best"), pointer(dir_ / "mid-full", "best"));
  EXPECT_EQ(checkpoint::CheckpointReader(rest.last_checkpoint).meta()["monitor"],
            checkpoint::CheckpointReader(full.last_checkpoint).meta()["monitor"]);
}

// checkpoint.resume=auto starts over when there is no checkpoint, but not when
// every checkpoint fails to verify: starting over would later replace them.
TEST_F(Trainer, AutoResumeRefusesCheckpointsThatDoNotVerify) {
  const std::vector<std::string> common = {"train.steps=2", "train.micro_batch_size=2", "checkpoint.interval=2",
                                           "checkpoint.resume=auto"};
  const TrainSummary first = train(options("auto", common));
  ASSERT_FALSE(first.last_checkpoint.empty());
  std::ofstream(fs::path(first.last_checkpoint) / "config.toml") << "";  // damaged after its commit
  try {
    train(options("auto", common));
    FAIL() << "resumed or started over";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("none of the 1 checkpoints under"), std::string::npos) << e.message();
  }
  EXPECT_TRUE(fs::exists(fs::path(first.last_checkpoint) / "meta.json"));
}

TEST_F(Trainer, Bf16AndFp16Train) {
  for (const char* precision : {"bf16", "fp16"}) {
    auto o = options(std::string("prec-") + precision,
                     {"train.steps=20", "train.micro_batch_size=8", std::string("train.precision=") + precision});
    const TrainSummary s = train(o);
    ASSERT_EQ(s.losses.size(), 20u);
    EXPECT_LT(s.losses.back(), s.losses.front()) << precision;
    for (double l : s.losses) EXPECT_TRUE(std::isfinite(l)) << precision;
  }
}

TEST_F(Trainer, StartsFromHuggingFaceWeights) {
  // A model in Hugging Face layout (as transformers.save_pretrained writes it) to start from.
  models::TransformerSpec spec = models::preset("gpt2-tiny");
  spec.vocab_size = 320;
  spec.max_seq_len = 32;
  spec.d_model = 32;
  models::TransformerLM pretrained(spec);
  pretrained.initialize(77);
  const std::string hf = (dir_ / "hf-start").string();
  models::save_hf(pretrained, hf);
  // tiny_run() sets sizes; from_pretrained fixes them, so they must be unset.
  auto pretrained_options = [&](const std::string& run, const std::vector<std::string>& extra) {
    auto o = options(run, extra);
    o.overrides.erase(std::remove_if(o.overrides.begin(), o.overrides.end(),
                                     [](const std::string& s) {
                                       return s.starts_with("model.n_layer") || s.starts_with("model.n_head") ||
                                              s.starts_with("model.d_model") || s.starts_with("model.max_seq_len");
                                     }),
                      o.overrides.end());
    return o;
  };
  auto o = pretrained_options(
      "from-hf", {"train.steps=2", "train.micro_batch_size=4", "model.from_pretrained=" + hf, "model.arch=gpt2"});
  const TrainSummary s = train(o);
  ASSERT_EQ(s.losses.size(), 2u);
  checkpoint::CheckpointReader r(s.last_checkpoint);
  EXPECT_EQ(r.global_shape("model/transformer.h.1.attn.c_attn.weight"), (Shape{32, 96}));
  // tiny_run()'s sizes are config.json's; another n_layer is refused with both values.
  const std::string clash =
      testing::error_message([&] { train(options("from-hf-clash", {"model.from_pretrained=" + hf, "model.n_layer=3"})); });
  EXPECT_NE(clash.find("model.n_layer = 3: model.from_pretrained='" + hf + "' fixes the model, and its config.json gives "
                       + std::to_string(spec.n_layer)),
            std::string::npos)
      << clash;
  // A key that changes the model's numerics would be ignored (config.json decides): refused by name.
  for (const std::string key : {"model.rope_theta=123", "model.tie_embeddings=false", "model.norm_eps=0.001",
                                "model.arch=llama"}) {
    const std::string message =
        testing::error_message([&] { train(pretrained_options("from-hf-ignored", {"model.from_pretrained=" + hf, key})); });
    EXPECT_NE(message.find(key.substr(0, key.find('='))), std::string::npos) << message;
    EXPECT_NE(message.find("fixes the model"), std::string::npos) << message;
  }
}

// A model.from_pretrained run takes every value its config.json gives, dropout included (transformers' own
// from_pretrained does), unless a key overrides it; its config.toml records the model trained and each value's
// source, and the checkpoint's config.json keeps the dropout.
TEST_F(Trainer, FromPretrainedTakesTheConfigWholeAndRecordsEachSource) {
  models::TransformerSpec spec = models::preset("gpt2-tiny");
  spec.vocab_size = 320;
  spec.max_seq_len = 32;
  spec.d_model = 32;
  spec.n_layer = 2;
  spec.dropout = 0.1;
  spec.init_std = 0.03;
  models::TransformerLM pretrained(spec);
  pretrained.initialize(79);
  const std::string hf = (dir_ / "hf-dropout").string();
  models::save_hf(pretrained, hf);
  const auto run = [&](const std::string& name, std::vector<std::string> extra) {
    auto o = options(name, {"train.steps=1", "train.micro_batch_size=4", "model.from_pretrained=" + hf});
    std::erase_if(o.overrides, [](const std::string& s) {
      return s.starts_with("model.n_layer") || s.starts_with("model.n_head") || s.starts_with("model.d_model") ||
             s.starts_with("model.max_seq_len") || s.starts_with("model.arch");
    });
    o.overrides.insert(o.overrides.end(), extra.begin(), extra.end());
    const TrainSummary summary = train(o);
    std::ifstream in(fs::path(o.run_dir) / "config.toml");
    const std::string toml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return std::pair{summary, toml};
  };
  const std::string source = hf + "/config.json";
  const auto [taken, toml] = run("from-hf-whole", {});
  EXPECT_NE(toml.find("arch = 'gpt2'  # from " + source), std::string::npos) << toml;
  EXPECT_NE(toml.find("n_layer = 2  # from " + source), std::string::npos) << toml;
  EXPECT_NE(toml.find("dropout = 0.1  # from " + source), std::string::npos) << toml;
  EXPECT_NE(toml.find("init_std = 0.03  # from " + source), std::string::npos) << toml;
  EXPECT_EQ(models::read_hf_config((fs::path(taken.last_checkpoint) / "config.json").string()).dropout, 0.1);
  // A given training option wins, and the record says over what.
  const auto [given, given_toml] = run("from-hf-given", {"model.dropout=0.0"});
  EXPECT_NE(given_toml.find("dropout = 0.0  # given over " + source + ", which says 0.1"), std::string::npos)
      << given_toml;
  EXPECT_EQ(models::read_hf_config((fs::path(given.last_checkpoint) / "config.json").string()).dropout, 0.0);
  // The recorded config.toml is a configuration of the same run: a resume from it alone continues.
  auto resumed = options("from-hf-whole", {});
  resumed.overrides = {"train.steps=2"};
  resumed.config_path = (fs::path(resumed.run_dir) / "config.toml").string();
  resumed.resume = true;
  EXPECT_EQ(train(resumed).losses.size(), 1u);
}

// A Llama 3.1-style model (RoPE scaling llama3) fine-tunes with its scaling, and its checkpoints keep it,
// so generate and export build the same function.
TEST_F(Trainer, FineTuningKeepsThePretrainedRopeScaling) {
  models::TransformerSpec spec = models::preset("llama-tiny");
  spec.vocab_size = 320;
  spec.max_seq_len = 64;
  spec.rope = {500000.0, RopeScaling::llama3, 8.0, 1.0, 4.0, 32.0};
  models::TransformerLM pretrained(spec);
  pretrained.initialize(78);
  const std::string hf = (dir_ / "hf-llama31").string();
  models::save_hf(pretrained, hf);
  auto o = options("from-hf-llama31", {"train.steps=2", "train.micro_batch_size=4", "model.from_pretrained=" + hf});
  o.overrides.erase(std::remove_if(o.overrides.begin(), o.overrides.end(),
                                   [](const std::string& s) {
                                     return s.starts_with("model.n_layer") || s.starts_with("model.n_head") ||
                                            s.starts_with("model.d_model") || s.starts_with("model.max_seq_len") ||
                                            s.starts_with("model.arch");
                                   }),
                    o.overrides.end());
  const TrainSummary s = train(o);
  ASSERT_EQ(s.losses.size(), 2u);
  const models::TransformerSpec saved = models::read_hf_config((fs::path(s.last_checkpoint) / "config.json").string());
  EXPECT_EQ(saved.rope.scaling, RopeScaling::llama3);
  EXPECT_EQ(saved.rope.theta, 500000.0);
  EXPECT_EQ(saved.rope.factor, 8.0);
  EXPECT_EQ(saved.rope.original_max_position, 32.0);
}

// A run's checkpoints tell transformers the tokenizer's end-of-document id (GPT-2: also the BOS), so
// an export's generate() stops there instead of at transformers' default 50256.
TEST_F(Trainer, CheckpointConfigNamesTheTokenizersSpecialTokens) {
  const TrainSummary s = train(options("token-ids", {"train.steps=1"}));
  std::ifstream in(fs::path(s.last_checkpoint) / "config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  const auto eod = data::Tokenizer::from_file(dir_ / "tokenizer.json").eod_id();
  ASSERT_TRUE(eod.has_value());
  EXPECT_EQ(config["eos_token_id"], *eod);
  EXPECT_EQ(config["bos_token_id"], *eod);
}

// model.init_std sets the initial weights' scale (GPT-2's output projections scaled by 1/sqrt(2·n_layer)).
TEST_F(Trainer, InitStdSetsTheInitialWeights) {
  models::TransformerSpec spec = detail::model_spec(
      load_config("", {"model.init_std=0.5", "model.n_layer=2", "model.n_head=2", "model.d_model=64"}).model, 320, 32);
  EXPECT_EQ(spec.init_std, 0.5);
  models::TransformerLM model(spec);
  model.initialize(3);
  int checked = 0;
  for (const nn::Parameter* p : model.parameters()) {
    if (p->init.kind != nn::InitKind::normal || p->name.find("c_attn.weight") == std::string::npos) continue;
    ++checked;
    const std::vector<float> w = p->var.data().to_vector<float>();
    double sum_sq = 0;
    for (float x : w) sum_sq += static_cast<double>(x) * x;
    EXPECT_NEAR(std::sqrt(sum_sq / static_cast<double>(w.size())), 0.5, 0.02) << p->name;
  }
  EXPECT_EQ(checked, 2);  // one per layer
}

// With data.eod_mask_loss the loss is the mean over the labels the global batch trains (those whose
// input is not <|endoftext|>), however the batch is cut into micro-batches: step 1's training loss and
// step 0's validation loss (both of the initial weights) match a direct computation on the whole batch.
// A tokenizer without an end-of-document token is an error.
TEST_F(Trainer, EodMaskLoss) {
  auto o = options("eod-masked", {"train.steps=1", "data.eod_mask_loss=true", "train.eval_interval=1",
                                  "train.eval_steps=2", "train.micro_batch_size=2", "train.global_batch_size=8"});
  const TrainSummary s = train(o);
  ASSERT_EQ(s.losses.size(), 1u);
  ASSERT_FALSE(s.val_losses.empty());
  const Config c = load_config("", o.overrides);
  const detail::DataSources d = detail::open_data(c, 8, 16);
  models::TransformerLM model(detail::model_spec(c.model, d.tokenizer.vocab_size(), c.train.seq_len));
  model.initialize(static_cast<std::uint64_t>(c.train.seed));
  const std::int64_t eod = *d.tokenizer.eod_id();
  autograd::NoGradGuard no_grad;
  const auto mean_loss = [&](std::shared_ptr<const data::SampleSource> source, std::int64_t samples, bool masked) {
    data::DataLoader loader(std::move(source), {.micro_batch_size = samples,
                                                .seed = static_cast<std::uint64_t>(c.train.seed),
                                                .prefetch = 0,
                                                .masked_input_token = masked ? eod : -1});
    const data::Batch b = loader.next();
    const auto labels = b.labels.to_vector<std::int64_t>();
    EXPECT_EQ(std::count(labels.begin(), labels.end(), data::kIgnoreLabel) > 0, masked);
    return model.loss(b.tokens, b.labels, nn::ForwardContext{}).data().item();
  };
  const double train_loss = mean_loss(d.train, 8, true), val_loss = mean_loss(d.valid, 16, true);
  EXPECT_NEAR(s.losses[0], train_loss, 1e-5 * train_loss);
  EXPECT_NEAR(s.val_losses[0].second, val_loss, 1e-5 * val_loss);
  EXPECT_GT(std::fabs(mean_loss(d.train, 8, false) - train_loss), 1e-3);  // the masking matters here
  data::BpeTrainerOptions bo;
  bo.vocab_size = 320;
  bo.threads = 1;
  data::BpeTrainer trainer(bo);
  trainer.feed("no special tokens in this one");
  const fs::path tokenizer = dir_ / "no-eod.json";
  data::write_tokenizer_json(trainer.train(), tokenizer);
  try {
    train(options("eod-none", {"train.steps=1", "data.eod_mask_loss=true", "data.tokenizer=" + tokenizer.string()}));
    ADD_FAILURE() << "a tokenizer without an end-of-document token was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("data.eod_mask_loss = true needs an end-of-document token"), std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find(tokenizer.string()), std::string::npos) << e.message();
  }
}

TEST_F(Trainer, InconsistentBatchSizesNameTheKeys) {
  auto o = options("bad", {"train.micro_batch_size=3", "train.global_batch_size=8"});
  try {
    train(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("train.global_batch_size=8 must be a multiple of micro_batch_size"), std::string::npos)
        << e.message();
  }
  auto missing = options("missing", {"data.paths=[\"/nonexistent/corpus\"]"});
  try {
    train(missing);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("/nonexistent/corpus"), std::string::npos) << e.message();
  }
}

// Without data.weights, a blend draws from each dataset in proportion to its
// tokens (not half and half because each was built with the run's samples),
// and validation blends every dataset's validation split.
TEST_F(Trainer, BlendsFollowTheDatasetsSizesAndValidateOnEveryDataset) {
  const fs::path small = dir_ / "small";
  testing::make_corpus(small, 300, dir_ / "tokenizer.json");  // the same tokenizer as the first
  auto config = [&](std::vector<std::string> extra) {
    auto o = options("blend",
                     {"data.paths=[\"" + (dir_ / "corpus").string() + "\", \"" + (small / "corpus").string() + "\"]",
                      "train.eval_interval=10"});
    o.overrides.insert(o.overrides.end(), extra.begin(), extra.end());
    return load_config("", o.overrides);
  };
  const double big_tokens = static_cast<double>(data::IndexedDataset::open((dir_ / "corpus").string())->total_tokens());
  const double small_tokens =
      static_cast<double>(data::IndexedDataset::open((small / "corpus").string())->total_tokens());
  const detail::DataSources d = detail::open_data(config({}), 4000, 64);
  auto share_of_second = [](const data::SampleSource& source) {
    const auto* blend = dynamic_cast<const data::BlendedDataset*>(&source);
    EXPECT_NE(blend, nullptr);
    if (!blend) return -1.0;
    const auto& which = blend->index().dataset;
    return static_cast<double>(std::count(which.begin(), which.end(), 1)) / static_cast<double>(which.size());
  };
  const double expected = small_tokens / (big_tokens + small_tokens);  // ~0.09: both split 90,10,0
  EXPECT_NEAR(share_of_second(*d.train), expected, 0.01);
  ASSERT_NE(d.valid, nullptr);
  EXPECT_NEAR(share_of_second(*d.valid), expected, 0.03);
  EXPECT_EQ(d.valid->size(), 64);
  // Explicit weights are followed as given; no evaluation, no validation stream.
  const detail::DataSources w = detail::open_data(config({"data.weights=[1, 3]", "train.eval_interval=0"}), 4000, 64);
  EXPECT_NEAR(share_of_second(*w.train), 0.75, 0.001);
  EXPECT_EQ(w.valid, nullptr);
  for (const char* bad : {"data.weights=[0, 0]", "data.weights=[1, -1]"}) {
    try {
      validate_config(config({bad}), 1);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("data.weights"), std::string::npos) << e.message();
    }
  }
}

// A warmup-stable-decay schedule needs its decay length, inside the steps after warmup; a run with one
// records it in the checkpoint, and its learning rate ends at min_lr.
TEST_F(Trainer, WarmupStableDecaySchedule) {
  const auto error_of = [&](std::vector<std::string> extra) {
    try {
      validate_config(load_config("", options("wsd-bad", std::move(extra)).overrides), 1);
      return std::string("no error");
    } catch (const Error& e) {
      return e.message();
    }
  };
  EXPECT_NE(error_of({"schedule.decay=\"wsd\"", "train.steps=10"}).find("schedule.wsd_decay_steps=0 must be in [1, 8]"),
            std::string::npos);
  EXPECT_NE(
      error_of({"schedule.decay=\"wsd\"", "train.steps=10", "schedule.warmup_steps=4", "schedule.wsd_decay_steps=7"})
          .find("schedule.wsd_decay_steps=7 must be in [1, 6]"),
      std::string::npos);
  // A warmup that fills the decay span is named as such, not as an empty range of wsd_decay_steps.
  EXPECT_NE(
      error_of({"schedule.decay=\"wsd\"", "train.steps=10", "schedule.warmup_steps=10", "schedule.wsd_decay_steps=2"})
          .find("schedule.warmup_steps=10 is not less than the 10 decay steps (schedule.decay_steps=0, so "
                "train.steps)"),
      std::string::npos);
  EXPECT_NE(error_of({"schedule.wsd_decay_style=\"step\""}).find("schedule.wsd_decay_style: unknown style 'step'"),
            std::string::npos);
  EXPECT_NE(error_of({"schedule.decay=\"wsd\""}).find("schedule.wsd_decay_steps"), std::string::npos);
  const TrainSummary s = train(options(
      "wsd", {"train.steps=4", "train.micro_batch_size=4", "schedule.decay=\"wsd\"", "schedule.wsd_decay_steps=2",
              "schedule.wsd_decay_style=\"linear\"", "schedule.min_lr=1e-5", "checkpoint.interval=4"}));
  ASSERT_EQ(s.losses.size(), 4u);
  std::ifstream meta(fs::path(s.last_checkpoint) / "meta.json");
  const nlohmann::json j = nlohmann::json::parse(meta);
  EXPECT_EQ(j["scheduler"]["decay"], "wsd");
  EXPECT_EQ(j["scheduler"]["wsd_decay_steps"], 2);
  EXPECT_EQ(j["scheduler"]["wsd_decay_style"], "linear");
  EXPECT_DOUBLE_EQ(j["scheduler"]["lr"].get<double>(), 1e-5);
}

// Pipeline misconfigurations are caught by validate_config, before a process
// group or a model exists; each message names the keys and values involved.
TEST_F(Trainer, PipelineMisconfigurationsAreClearErrors) {
  auto error_of = [&](int world, std::vector<std::string> extra) -> std::string {
    extra.insert(extra.begin(), "train.micro_batch_size=2");
    try {
      validate_config(load_config("", options("pp", std::move(extra)).overrides), world);
    } catch (const Error& e) {
      return e.message();
    }
    return "";
  };
  auto expect = [&](int world, std::vector<std::string> extra, const std::string& want) {
    const std::string got = error_of(world, extra);
    EXPECT_NE(got.find(want), std::string::npos) << "expected '" << want << "', got '" << got << "'";
  };
  const std::string pp2 = "dist.pipeline_parallel_size=2";
  expect(2, {pp2, "model.n_layer=3"},
         "3 layers do not divide evenly over 2 pipeline stages; give the layers of each stage in "
         "dist.pipeline_num_layers (e.g. [2, 1])");
  expect(2, {pp2, "model.n_layer=4", "dist.pipeline_num_layers=[1, 1, 2]"},
         "dist.pipeline_num_layers has 3 entries but there are 2 pipeline stages");
  expect(2, {pp2, "model.n_layer=4", "dist.pipeline_num_layers=[1, 2]"},
         "dist.pipeline_num_layers sums to 3 but the model has n_layer=4");
  expect(2,
         {pp2, "model.n_layer=4", "dist.pipeline_schedule=\"interleaved\"", "dist.virtual_pipeline_size=2",
          "train.global_batch_size=6"},
         "the interleaved pipeline schedule needs the number of micro-batches per step (3) to be a multiple of "
         "dist.pipeline_parallel_size (2); use 2 or 4 micro-batches");
  expect(2, {pp2, "model.n_layer=4", "dist.virtual_pipeline_size=2"},
         "dist.virtual_pipeline_size=2 needs dist.pipeline_schedule='interleaved'");
  expect(2,
         {pp2, "model.n_layer=4", "dist.pipeline_schedule=\"interleaved\"", "dist.virtual_pipeline_size=2",
          "dist.pipeline_num_layers=[1, 3]"},
         "dist.pipeline_num_layers has 2 entries but there are 4 virtual pipeline stages");
  expect(1, {"dist.virtual_pipeline_size=2"}, "it needs dist.pipeline_parallel_size of at least 2");
  expect(2, {pp2, "dist.pipeline_schedule=\"zigzag\""},
         "dist.pipeline_schedule='zigzag' is not a pipeline schedule; use gpipe, 1f1b or interleaved");
  for (const char* stage : {"dist.zero_stage=2", "dist.zero_stage=3"}) {
    expect(4, {pp2, stage},
           fmt::format("{} with dist.pipeline_parallel_size=2: ZeRO-2/3 partition gradients",
                       std::string(stage).substr(5)));
  }
  expect(3, {pp2}, "tp × pp × cp = 2 does not divide the 3 ranks of the job");
  // What is valid: an explicit uneven split; interleaving with m a multiple of p; ZeRO-1 with data parallelism.
  EXPECT_EQ(error_of(2, {pp2, "model.n_layer=4", "dist.pipeline_num_layers=[1, 3]"}), "");
  EXPECT_EQ(error_of(2, {pp2, "model.n_layer=4", "dist.pipeline_schedule=\"interleaved\"",
                         "dist.virtual_pipeline_size=2", "train.global_batch_size=8"}),
            "");
  EXPECT_EQ(error_of(4, {pp2, "model.n_layer=4", "dist.zero_stage=1", "train.global_batch_size=8"}), "");
}

// Sizes larger than the job are errors, never an overflowed product: tp × pp
// wrapping to 0 was a division by zero (SIGFPE), tp × pp wrapping to 1 passed
// as a one-rank layout, and micro_batch_size × dp wrapping to 0 divided by zero.
TEST(TrainerConfig, HugeSizesAreErrorsNotOverflows) {
  auto error_of = [](int world, const std::vector<std::string>& overrides) -> std::string {
    try {
      validate_config(load_config("", overrides), world);
    } catch (const Error& e) {
      return e.message();
    }
    return "";
  };
  EXPECT_EQ(error_of(1, {"dist.tensor_parallel_size=4294967296", "dist.pipeline_parallel_size=4294967296"}),
            "dist: tensor_parallel_size × pipeline_parallel_size × context_parallel_size = 4294967296 × 4294967296 × 1 "
            "is more than the job's 1 rank(s)");
  // 7 × 7905747460161236407 = 3 · 2^64 + 1, which wraps to 1: refused before the product, tp = 7 being no power of two
  EXPECT_EQ(error_of(1, {"dist.tensor_parallel_size=7", "dist.pipeline_parallel_size=7905747460161236407"}),
            "dist.tensor_parallel_size must be a power of two, got 7");
  // 4 × (2^62 + 1) = 2^64 + 4
  EXPECT_EQ(error_of(4, {"dist.tensor_parallel_size=4", "dist.data_parallel_size=4611686018427387905"}),
            "dist.data_parallel_size=4611686018427387905 must be between 1 and the job's 4 rank(s)");
  EXPECT_EQ(error_of(4, {"train.micro_batch_size=4611686018427387904", "train.global_batch_size=8"}),
            "train.micro_batch_size=4611686018427387904 × data_parallel_size=4 overflows a 64-bit integer");
}

// Whether "auto" shows the live progress line when stdout is a pseudo-terminal, as
// Open MPI gives every rank whatever mpirun's own stdout is.
bool live_on_a_pty() {
  int master = -1, slave = -1;
  if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) {
    ADD_FAILURE() << "openpty failed";
    return false;
  }
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  ::dup2(slave, STDOUT_FILENO);
  const bool live = MetricsLogger("", "auto", true).live();
  std::fflush(stdout);
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  ::close(slave);
  ::close(master);
  return live;
}

TEST(Metrics, LiveProgressUnderMpiFollowsTheLaunchersTerminal) {
  ::unsetenv("TRIDENT_STDOUT_IS_TTY");
  EXPECT_TRUE(live_on_a_pty());  // a terminal, no MPI
  // `trident launch ... > log`: the rank's stdout is mpirun's pty, the user's is a file.
  ::setenv("TRIDENT_STDOUT_IS_TTY", "0", 1);
  EXPECT_FALSE(live_on_a_pty());
  ::setenv("TRIDENT_STDOUT_IS_TTY", "1", 1);
  EXPECT_TRUE(live_on_a_pty());
  ::unsetenv("TRIDENT_STDOUT_IS_TTY");
  // Started by mpirun directly: nobody says, so plain lines (safe in a log file).
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_FALSE(live_on_a_pty());
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_TRUE(MetricsLogger("", "on", true).live());
  EXPECT_FALSE(MetricsLogger("", "off", true).live());
  EXPECT_FALSE(MetricsLogger("", "on", false).live());  // not rank 0
}

}  // namespace
}  // namespace trident::train
