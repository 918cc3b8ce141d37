#include "trident/train/config.h"

#include <gtest/gtest.h>

#include "testing/helpers.h"

#include "trident/core/error.h"

namespace trident::train {
namespace {

TEST(Config, ParsesSectionsAndTypes) {
  Config c;
  apply_toml(c, R"(
[model]
arch = "llama"
n_layer = 2
dropout = 0.1
tie_embeddings = false
[data]
paths = ["a", "b"]
weights = [0.7, 3]
[optim]
betas = [0.9, 0.999]
lr = 1e-3
[dist]
tensor_parallel_size = 2
pipeline_num_layers = [1, 1]
)",
             "test.toml");
  EXPECT_EQ(c.model.arch, "llama");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_DOUBLE_EQ(c.model.dropout, 0.1);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.data.paths, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.data.weights, (std::vector<double>{0.7, 3.0}));  // integers accepted as floats
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-3);
  EXPECT_EQ(c.dist.pipeline_num_layers, (std::vector<std::int64_t>{1, 1}));
}

TEST(Config, UnknownKeySuggestsNearest) {
  Config c;
  std::string msg = test::error_message([&] { apply_toml(c, "[train]\nmicro_bach_size = 4\n", "run.toml"); });
  EXPECT_EQ(msg, "run.toml: unknown key 'train.micro_bach_size' (did you mean 'train.micro_batch_size'?)");
  msg = test::error_message([&] { apply_override(c, "train.lr=0.1"); });
  EXPECT_EQ(msg, "--set train.lr=0.1: unknown key 'train.lr' (did you mean 'optim.lr'?)");
  msg = test::error_message([&] { apply_toml(c, "[trian]\nsteps = 4\n", "run.toml"); });
  EXPECT_NE(msg.find("unknown key 'trian'"), std::string::npos) << msg;
  msg = test::error_message([&] { apply_toml(c, "[model]\ncompletely_unrelated_thing = 4\n", "run.toml"); });
  EXPECT_NE(msg.find("unknown key 'model.completely_unrelated_thing'"), std::string::npos) << msg;
}

TEST(Config, WrongTypeNamesKeyAndExpectation) {
  Config c;
  EXPECT_EQ(test::error_message([&] { apply_toml(c, "[train]\nsteps = \"ten\"\n", "run.toml"); }),
            "run.toml: key 'train.steps' must be an integer, got \"ten\"");
  EXPECT_EQ(test::error_message([&] { apply_toml(c, "[train]\nsteps = 1.5\n", "run.toml"); }),
            "run.toml: key 'train.steps' must be an integer, got 1.5");
  EXPECT_NE(test::error_message([&] { apply_toml(c, "[data]\nweights = [\"x\"]\n", "run.toml"); }).find("data.weights[]"),
            std::string::npos);
  EXPECT_NE(test::error_message([&] { apply_toml(c, "[train\nsteps = 1\n", "bad.toml"); }).find("bad.toml:1:"),
            std::string::npos);
  EXPECT_NE(test::error_message([&] { apply_file(c, "/nonexistent/x.toml"); }).find("/nonexistent/x.toml"), std::string::npos);
}

TEST(Config, AWrongValueIsNamedOnOneLine) {
  // A table where a value belongs is a wrong type, not an unknown key, and the
  // message stays on one line however the table was written.
  Config c;
  EXPECT_EQ(test::error_message([&] { apply_toml(c, "[optim]\nbetas = {beta1 = 0.9, beta2 = 0.95}\n", "run.toml"); }),
            "run.toml: key 'optim.betas' must be a list of floats, got { beta1 = 0.9, beta2 = 0.95 }");
  EXPECT_EQ(test::error_message([&] { apply_toml(c, "[optim.betas]\nbeta1 = 0.9\n[optim.betas.x]\ny = 1\n", "run.toml"); }),
            "run.toml: key 'optim.betas' must be a list of floats, got { beta1 = 0.9, x = { y = 1 } }");
  // A string with a line break is shown escaped.
  EXPECT_EQ(test::error_message([&] { apply_toml(c, "[train]\nsteps = \"\"\"ten\nsteps\"\"\"\n", "run.toml"); }),
            "run.toml: key 'train.steps' must be an integer, got \"ten\\nsteps\"");
  // Deeper tables under a section that are not keys stay unknown keys.
  EXPECT_EQ(test::error_message([&] { apply_toml(c, "[optim.bets]\nbeta1 = 0.9\n", "run.toml"); }),
            "run.toml: unknown key 'optim.bets' (did you mean 'optim.betas'?)");
}

TEST(Config, OverridesParseTomlValuesAndBareWords) {
  Config c = load_config("", {"train.precision=bf16", "train.steps=20", "optim.betas=[0.8, 0.9]",
                              "dist.sequence_parallel=true", "data.paths=[\"x\"]", "model.preset=gpt2"});
  EXPECT_EQ(c.train.precision, "bf16");
  EXPECT_EQ(c.train.steps, 20);
  EXPECT_EQ(c.optim.betas, (std::vector<double>{0.8, 0.9}));
  EXPECT_TRUE(c.dist.sequence_parallel);
  EXPECT_EQ(c.data.paths, (std::vector<std::string>{"x"}));
  EXPECT_EQ(c.model.preset, "gpt2");
  EXPECT_NE(test::error_message([&] { apply_override(c, "train.steps=many"); }).find("must be an integer"), std::string::npos);
  EXPECT_NE(test::error_message([&] { apply_override(c, "nonsense"); }).find("expected section.key=value"), std::string::npos);
}

TEST(Config, ResolvedTomlRoundTrips) {
  Config c = load_config("", {"train.precision=bf16", "data.paths=[\"a b\", \"c\"]", "optim.lr=0.00025"});
  const std::string text = to_toml(c);
  EXPECT_NE(text.find("[train]\n"), std::string::npos);
  Config back;
  apply_toml(back, text, "resolved");
  EXPECT_EQ(to_toml(back), text);
  EXPECT_EQ(back.data.paths, c.data.paths);
  EXPECT_DOUBLE_EQ(back.optim.lr, 0.00025);
  EXPECT_GT(config_keys().size(), 40u);
}

}  // namespace
}  // namespace trident::train
