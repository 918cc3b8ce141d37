// One padded document per sample (data.packing = false) and train.epochs, on one process: the loss is
// the mean over the real tokens (padding changes nothing, in its amount or its ids), tokens/s counts real
// tokens, train.epochs resolves the steps over the blended training set, and a run resumed in the middle
// of its second epoch continues bit for bit (docs/data.md, "One document per sample" and "Epochs").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "corpus_suite.h"
#include "trident/checkpoint/sharded.h"
#include "testing/helpers.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/loader.h"
#include "trident/data/dataset/split.h"
#include "trident/dist/self_communicator.h"
#include "trident/train/run.h"
#include "trident/train/setup.h"
#include "trident/train/step.h"

namespace trident::train {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// 40 documents (one grammar line each): 36 train, 4 validation by the tiny runs' split 90,10,0.
class Unpacked : public testing::CorpusSuite<Unpacked> {
 public:
  static constexpr const char* kDir = "unpacked";
  static constexpr int kLines = 40;

 protected:
  static TrainOptions options(const std::string& run, const std::vector<std::string>& extra) {
    TrainOptions o = options_with_cache(run, "cache", extra);
    o.overrides.insert(o.overrides.begin(), "train.peak_gflops=1");  // no second spent measuring the peak
    o.world = dist::self_communicator();
    return o;
  }
  static std::int64_t longest_document() {
    const auto ds = data::IndexedDataset::open((dir_ / "corpus").string());
    const auto lengths = ds->sequence_lengths();
    return *std::max_element(lengths.begin(), lengths.end());
  }
};

// The step's loss and step 0's validation loss are the mean over the real labels of a direct computation
// on the whole global batch, with the loader's key mask; there is padding to ignore.
TEST_F(Unpacked, LossIsTheMeanOverRealTokens) {
  const TrainOptions o = options("mean", {"data.packing=false", "train.steps=1", "train.eval_interval=1",
                                          "train.eval_steps=1", "train.micro_batch_size=2",
                                          "train.global_batch_size=8"});
  const TrainSummary s = train(o);
  ASSERT_EQ(s.losses.size(), 1u);
  ASSERT_FALSE(s.val_losses.empty());
  const Config c = load_config("", o.overrides);
  const detail::DataSources d = detail::open_data(c, 8, 8);
  ASSERT_TRUE(d.train->padded());
  models::TransformerLM model(detail::model_spec(c.model, d.tokenizer.vocab_size(), c.train.seq_len));
  model.initialize(static_cast<std::uint64_t>(c.train.seed));
  autograd::NoGradGuard no_grad;
  const auto mean_loss = [&](std::shared_ptr<const data::SampleSource> source) {
    data::DataLoader loader(std::move(source), {.micro_batch_size = 8,
                                                .seed = static_cast<std::uint64_t>(c.train.seed),
                                                .prefetch = 0});
    const data::Batch b = loader.next();
    const auto labels = b.labels.to_vector<std::int64_t>();
    const auto mask = b.key_mask.to(DType::i64).to_vector<std::int64_t>();
    EXPECT_GT(std::count(mask.begin(), mask.end(), 0), 8 * 4) << "the samples are hardly padded";
    EXPECT_GT(std::count(labels.begin(), labels.end(), data::kIgnoreLabel), 8 * 4);
    nn::ForwardContext ctx;
    ctx.key_mask = b.key_mask;
    return model.loss(b.tokens, b.labels, ctx).data().item();
  };
  const double train_loss = mean_loss(d.train), val_loss = mean_loss(d.valid);
  EXPECT_NEAR(s.losses[0], train_loss, 1e-5 * train_loss);
  EXPECT_NEAR(s.val_losses[0].second, val_loss, 1e-5 * val_loss);
}

// More padding (a longer train.seq_len than any document) trains the same model: the same losses,
// validation losses and final weights.
TEST_F(Unpacked, TheAmountOfPaddingChangesNothing) {
  const std::int64_t longest = longest_document();
  const std::vector<std::string> common = {"data.packing=false", "train.steps=4", "train.micro_batch_size=4",
                                           "train.eval_interval=2", "train.eval_steps=1",
                                           fmt::format("model.max_seq_len={}", longest + 24)};
  const TrainSummary tight = train(options("tight", with(common, {fmt::format("train.seq_len={}", longest)})));
  const TrainSummary loose = train(options("loose", with(common, {fmt::format("train.seq_len={}", longest + 24)})));
  ASSERT_EQ(tight.losses.size(), 4u);
  ASSERT_EQ(loose.losses.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_NEAR(loose.losses[i], tight.losses[i], 1e-6 * tight.losses[i]) << i;
  ASSERT_EQ(loose.val_losses.size(), tight.val_losses.size());
  for (std::size_t i = 0; i < tight.val_losses.size(); ++i)
    EXPECT_NEAR(loose.val_losses[i].second, tight.val_losses[i].second, 1e-6 * tight.val_losses[i].second);
  // The same final weights, to the summation order's rounding: the sums over rows (bias gradients) run
  // over more rows of zeros in the loose run, and AdamW normalises the rounding noise of the key bias,
  // whose gradient is 0 exactly in theory (softmax ignores a constant on every key), to full-size steps.
  const checkpoint::CheckpointReader a(tight.last_checkpoint), b(loose.last_checkpoint);
  ASSERT_EQ(a.keys(), b.keys());
  for (const std::string& key : a.keys()) {
    if (!key.starts_with("model/")) continue;
    const std::vector<double> x = a.read(key, DType::f64).to_vector<double>();
    const std::vector<double> y = b.read(key, DType::f64).to_vector<double>();
    ASSERT_EQ(x.size(), y.size()) << key;
    EXPECT_LE(testing::rel_err(y, x), 2e-4) << key;
  }
}

// An encoder sees every key of its sample unless the key mask hides it: with the mask, the ids at the
// padding positions change nothing; without it they would.
TEST_F(Unpacked, AnEncodersPaddingIdsChangeNothing) {
  const Config c = load_config("", {"model.arch=bert", "model.n_layer=2", "model.n_head=4", "model.d_model=32",
                                    "model.d_ff=64", "model.max_seq_len=16"});
  models::TransformerLM model(detail::model_spec(c.model, 64, 16));
  model.initialize(7);
  autograd::NoGradGuard no_grad;
  const std::vector<std::int64_t> real = {9, 16};  // sample 0 is padded after 9 tokens
  std::vector<std::int64_t> ids(32), labels(32, data::kIgnoreLabel), mask(32);
  for (std::int64_t r = 0; r < 2; ++r) {
    for (std::int64_t t = 0; t < 16; ++t) {
      const auto at = static_cast<std::size_t>(16 * r + t);
      ids[at] = 5 + (7 * r + 3 * t) % 50;
      mask[at] = t < real[static_cast<std::size_t>(r)] ? 1 : 0;
      if (mask[at] && t % 3 == 1) labels[at] = (ids[at] + 11) % 64;
    }
  }
  const Tensor y = Tensor::from_vector(labels, {2, 16});
  const auto loss = [&](std::int64_t pad, bool masked) {
    std::vector<std::int64_t> x = ids;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (mask[i] == 0) x[i] = pad;
    nn::ForwardContext ctx;
    if (masked) ctx.key_mask = Tensor::from_vector(mask, {2, 16});
    return model.loss(Tensor::from_vector(x, {2, 16}), y, ctx).data().item();
  };
  EXPECT_NEAR(loss(0, true), loss(41, true), 1e-6 * loss(0, true));
  EXPECT_GT(std::fabs(loss(0, false) - loss(41, false)), 1e-4);  // the mask is what hides them
}

// tokens/s counts the real tokens of the global batch: fewer than the batch computes.
TEST_F(Unpacked, AStepCountsItsRealTokens) {
  const std::unique_ptr<detail::Run> run =
      detail::build_run(options("tokens", {"data.packing=false", "train.steps=1", "train.micro_batch_size=4"}));
  EXPECT_EQ(run->tokens_before, 0);
  data::EpochOrder order(run->data.train->size(), run->loader_options.seed);
  const auto real = static_cast<double>(data::real_tokens(*run->data.train, order, 0, 4, run->loader_options));
  const std::optional<detail::StepResult> r = detail::train_step(*run);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->tokens, real);
  EXPECT_LT(r->tokens, run->tokens_per_step);
}

// train.epochs=3 over 36 documents in global batches of 8: ⌊108 / 8⌋ = 13 steps, logged with the epoch.
// Resumed from step 6 (48 samples: in the second epoch, whose order is a fresh shuffle), the run repeats
// steps 7–13 bit for bit.
TEST_F(Unpacked, EpochsResolveTheStepsAndAResumeInTheSecondEpochIsExact) {
  const std::vector<std::string> common = {"data.packing=false", "train.epochs=3", "train.micro_batch_size=2",
                                           "train.global_batch_size=8", "model.dropout=0.1", "checkpoint.interval=6",
                                           "checkpoint.keep=5", "log.progress=off", "train.log_interval=1"};
  TrainOptions o = options("epochs", common);
  o.quiet = false;  // metrics.jsonl is the logger's
  const TrainSummary full = train(o);
  ASSERT_EQ(full.losses.size(), 13u);
  std::ifstream config_toml(fs::path(o.run_dir) / "config.toml");
  const std::string saved((std::istreambuf_iterator<char>(config_toml)), std::istreambuf_iterator<char>());
  EXPECT_NE(saved.find("\n# steps = 13: resolved from train.epochs\nepochs = 3.0\n"), std::string::npos) << saved;
  std::ifstream metrics(fs::path(o.run_dir) / "metrics.jsonl");
  std::vector<double> epochs;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) epochs.push_back(j.at("epoch").get<double>());
  }
  ASSERT_EQ(epochs.size(), 13u);
  EXPECT_DOUBLE_EQ(epochs[5], 48.0 / 36.0);
  EXPECT_DOUBLE_EQ(epochs.back(), 104.0 / 36.0);

  TrainOptions resumed_options = options("epochs-resumed", common);
  resumed_options.overrides.push_back(
      "checkpoint.resume=" + (fs::path(o.run_dir) / "checkpoints" / "step_00000006").string());
  const TrainSummary resumed = train(resumed_options);
  ASSERT_EQ(resumed.losses.size(), 7u);
  for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(resumed.losses[i], full.losses[6 + i]) << "step " << 7 + i;
  EXPECT_EQ(testing::model_values(resumed.last_checkpoint), testing::model_values(full.last_checkpoint));
}

// An epoch of a blend is one pass over every dataset's training split (documents, unpacked; windows,
// packed), and the blend holds one epoch, which the loader reads again in a fresh order each epoch.
TEST_F(Unpacked, EpochsCountTheBlendedTrainingSet) {
  const fs::path small = dir_ / "small";
  if (!fs::exists(small / "corpus.idx")) testing::make_corpus(small, 20, dir_ / "tokenizer.json");
  const auto overrides = [&](std::vector<std::string> extra) {
    std::vector<std::string> o = testing::tiny_run(dir_, "cache");
    o.push_back("data.paths=[\"" + (dir_ / "corpus").string() + "\", \"" + (small / "corpus").string() + "\"]");
    o.insert(o.end(), extra.begin(), extra.end());
    return o;
  };
  Config c = load_config("", overrides({"data.packing=false", "train.epochs=1", "train.global_batch_size=8",
                                        "train.micro_batch_size=2"}));
  EXPECT_EQ(detail::epoch_samples(c, models::Objective::next_token), 36 + 18);
  const std::string line = detail::resolve_epochs(c, 1);
  EXPECT_EQ(c.train.steps, 6);  // ⌊54 / 8⌋
  EXPECT_NE(line.find("train.epochs=1: 6 steps = ⌊1 × 54 samples per epoch / global batch 8⌋ (the last 6 samples "
                      "of the last epoch are not trained)"),
            std::string::npos)
      << line;
  const detail::DataSources d = detail::open_data(c, 54, 8);
  EXPECT_EQ(d.train->size(), 54);
  EXPECT_TRUE(d.train->padded());
  // Packed, an epoch is the windows of train.seq_len + 1 tokens.
  Config packed = load_config("", overrides({"train.epochs=1"}));
  const std::int64_t windows = detail::epoch_samples(packed, models::Objective::next_token);
  std::int64_t tokens = 0;
  for (const fs::path& p : {dir_ / "corpus", small / "corpus"}) {
    const auto ds = data::IndexedDataset::open(p.string());
    const auto split = data::parse_split("90,10,0", static_cast<std::int64_t>(ds->size()));
    const auto lengths = ds->sequence_lengths();
    const std::int64_t t = std::accumulate(lengths.begin() + split[0].begin, lengths.begin() + split[0].end, std::int64_t{0});
    tokens += (t - 1) / 32;
  }
  EXPECT_EQ(windows, tokens);
  // Fewer samples than a global batch: an error naming the keys.
  Config tiny = load_config("", overrides({"train.epochs=0.05", "train.global_batch_size=8", "train.micro_batch_size=2",
                                           "data.packing=false"}));
  EXPECT_NE(testing::error_message([&] { detail::resolve_epochs(tiny, 1); })
                .find("train.epochs=0.05 over the training set's 54 samples per epoch (one per document, "
                      "data.packing = false; data.split '90,10,0') is 2 samples, less than one global batch of 8"),
            std::string::npos);
}

}  // namespace
}  // namespace trident::train
