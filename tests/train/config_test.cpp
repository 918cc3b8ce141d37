#include "trident/train/config/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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
attention_dropout = 0.05
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
  EXPECT_DOUBLE_EQ(c.model.attention_dropout, 0.05);
  EXPECT_EQ(c.model.tie_embeddings, false);
  Config back;  // a key given (one that is otherwise left unset) round-trips through config.toml
  apply_toml(back, to_toml(c), "config.toml");
  EXPECT_DOUBLE_EQ(back.model.attention_dropout, 0.05);
  EXPECT_TRUE(back.model.given.contains("attention_dropout"));
  EXPECT_EQ(c.data.paths, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.data.weights, (std::vector<double>{0.7, 3.0}));  // integers accepted as floats
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-3);
  EXPECT_EQ(c.dist.pipeline_num_layers, (std::vector<std::int64_t>{1, 1}));
}

TEST(Config, UnknownKeySuggestsNearest) {
  Config c;
  std::string msg = testing::error_message([&] { apply_toml(c, "[train]\nmicro_bach_size = 4\n", "run.toml"); });
  EXPECT_EQ(msg, "run.toml:2: unknown key 'train.micro_bach_size' (did you mean 'train.micro_batch_size'?)");
  msg = testing::error_message([&] { apply_override(c, "train.lr=0.1"); });
  EXPECT_EQ(msg, "--set train.lr=0.1: unknown key 'train.lr' (did you mean 'optim.lr'?)");
  msg = testing::error_message([&] { apply_toml(c, "[trian]\nsteps = 4\n", "run.toml"); });
  EXPECT_NE(msg.find("unknown key 'trian'"), std::string::npos) << msg;
  msg = testing::error_message([&] { apply_toml(c, "[model]\ncompletely_unrelated_thing = 4\n", "run.toml"); });
  EXPECT_NE(msg.find("unknown key 'model.completely_unrelated_thing'"), std::string::npos) << msg;
}

// The suggestion is the key the user most likely meant: a key whose name
// contains what was typed (a shortened name), one a typo away, the same name in
// another section, or the section itself; never an unrelated short key that
// happens to be a few edits away ('schedule.warmup' suggested 'model.arch').
TEST(Config, NearestKeyIsAPlausibleOne) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train.micro_bach_size", "train.micro_batch_size"},
      {"train.lr", "optim.lr"},
      {"lr", "optim.lr"},
      {"optimizer.lr", "optim.lr"},
      {"trian.steps", "train.steps"},
      {"model.n_layers", "model.n_layer"},
      {"model.layers", "model.n_layer"},
      {"model.heads", "model.n_head"},
      {"data.path", "data.paths"},
      {"schedule.warmup", "schedule.warmup_steps"},
      {"dist.zero", "dist.zero_stage"},
      {"train.batch_size", "train.micro_batch_size"},
      {"trian", "train"},
      {"optimizer", "optim"},
      {"dist.tp", ""},
      {"model.completely_unrelated_thing", ""},
  };
  for (const auto& [typed, want] : cases) EXPECT_EQ(nearest_key(typed), want) << typed;
}

TEST(Config, WrongTypeNamesKeyAndExpectation) {
  Config c;
  EXPECT_EQ(testing::error_message([&] { apply_toml(c, "[train]\nsteps = \"ten\"\n", "run.toml"); }),
            "run.toml:2: key 'train.steps' must be an integer, got \"ten\"");
  EXPECT_EQ(testing::error_message([&] { apply_toml(c, "[train]\nsteps = 1.5\n", "run.toml"); }),
            "run.toml:2: key 'train.steps' must be an integer, got 1.5");
  EXPECT_NE(testing::error_message([&] { apply_toml(c, "[data]\nweights = [\"x\"]\n", "run.toml"); }).find("data.weights[]"),
            std::string::npos);
  EXPECT_NE(testing::error_message([&] { apply_toml(c, "[train\nsteps = 1\n", "bad.toml"); }).find("bad.toml:1:"),
            std::string::npos);
  EXPECT_NE(testing::error_message([&] { apply_file(c, "/nonexistent/x.toml"); }).find("/nonexistent/x.toml"), std::string::npos);
  // A directory is not an empty config (it read as one: the run went on with the defaults).
  const std::string dir = ::testing::TempDir();
  EXPECT_EQ(testing::error_message([&] { apply_file(c, dir); }),
            "cannot read config file '" + dir + "': it is a directory, not a TOML file");
}

// Issue 48: a single value where a list goes shows the list's syntax, in the form it came in.
TEST(Config, ASingleValueForAListShowsTheListSyntax) {
  Config c;
  EXPECT_EQ(testing::error_message([&] { apply_override(c, "data.paths=corpus"); }),
            "--set data.paths=corpus: key 'data.paths' must be a list of strings, got \"corpus\" (a list is written in "
            "brackets: --set 'data.paths=[\"corpus\"]')");
  EXPECT_EQ(testing::error_message([&] { apply_toml(c, "[optim]\nbetas = 0.9\n", "run.toml"); }),
            "run.toml:2: key 'optim.betas' must be a list of floats, got 0.9 (a list is written in brackets: betas = "
            "[0.9])");
}

TEST(Config, AWrongValueIsNamedOnOneLine) {
  // A table where a value belongs is a wrong type, not an unknown key, and the
  // message stays on one line however the table was written.
  Config c;
  EXPECT_EQ(testing::error_message([&] { apply_toml(c, "[optim]\nbetas = {beta1 = 0.9, beta2 = 0.95}\n", "run.toml"); }),
            "run.toml:2: key 'optim.betas' must be a list of floats, got { beta1 = 0.9, beta2 = 0.95 }");
  EXPECT_EQ(testing::error_message([&] { apply_toml(c, "[optim.betas]\nbeta1 = 0.9\n[optim.betas.x]\ny = 1\n", "run.toml"); }),
            "run.toml:1: key 'optim.betas' must be a list of floats, got { beta1 = 0.9, x = { y = 1 } }");
  // A string with a line break is shown escaped.
  EXPECT_EQ(testing::error_message([&] { apply_toml(c, "[train]\nsteps = \"\"\"ten\nsteps\"\"\"\n", "run.toml"); }),
            "run.toml:2: key 'train.steps' must be an integer, got \"ten\\nsteps\"");
  // Deeper tables under a section that are not keys stay unknown keys.
  EXPECT_EQ(testing::error_message([&] { apply_toml(c, "[optim.bets]\nbeta1 = 0.9\n", "run.toml"); }),
            "run.toml:1: unknown key 'optim.bets' (did you mean 'optim.betas'?)");
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
  EXPECT_NE(testing::error_message([&] { apply_override(c, "train.steps=many"); }).find("must be an integer"), std::string::npos);
  EXPECT_NE(testing::error_message([&] { apply_override(c, "nonsense"); }).find("expected section.key=value"), std::string::npos);
  // Spaces around '=' as a TOML file has them: the key was 'train.steps ' ("did you mean 'train.steps'?").
  apply_override(c, "train.steps = 30");
  EXPECT_EQ(c.train.steps, 30);
  apply_override(c, "train.precision = fp16");
  EXPECT_EQ(c.train.precision, "fp16");
  EXPECT_NE(testing::error_message([&] { apply_override(c, " = 3"); }).find("expected section.key=value"), std::string::npos);
}

// Every numeric key has a domain, checked where the value is given (so the
// message names the file or --set), instead of being silently reinterpreted
// (a negative global batch size meant "the default") or failing mid-run in an
// optimizer kernel that cannot name the key.
TEST(Config, OutOfRangeValuesAreErrorsNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"train.global_batch_size=-8", "key 'train.global_batch_size' must be 0 or more"},
      {"train.micro_batch_size=0", "key 'train.micro_batch_size' must be positive, got 0"},
      {"train.seq_len=-1", "key 'train.seq_len' must be positive"},
      {"train.steps=0", "key 'train.steps' must be positive"},
      {"train.log_interval=0", "key 'train.log_interval' must be positive"},
      {"train.eval_interval=-1", "key 'train.eval_interval' must be 0 or more"},
      {"train.eval_steps=-3", "key 'train.eval_steps' must be positive"},
      {"train.threads=-4", "key 'train.threads' must be 0 or more"},
      {"train.peak_gflops=-5", "key 'train.peak_gflops' must be a finite number >= 0"},
      {"data.prefetch=-5", "key 'data.prefetch' must be 0 or more"},
      {"data.weights=[1, -1]", "key 'data.weights' must be a finite number >= 0, got -1"},
      {"model.n_layer=-1", "key 'model.n_layer' must be 0 or more"},
      {"model.dropout=1.5", "key 'model.dropout' must be in [0, 1), got 1.5"},
      {"model.attention_dropout=1", "key 'model.attention_dropout' must be in [0, 1), got 1"},
      {"model.attention_dropout=-0.1", "key 'model.attention_dropout' must be in [0, 1), got -0.1"},
      {"model.norm_eps=-1", "key 'model.norm_eps' must be a finite number >= 0"},
      {"model.rope_theta=0", "key 'model.rope_theta' must be a positive finite number"},
      {"model.init_std=0", "key 'model.init_std' must be a positive finite number"},
      {"optim.lr=inf", "key 'optim.lr' must be a positive finite number, got inf"},
      {"optim.lr=nan", "key 'optim.lr' must be a positive finite number, got nan"},
      {"optim.betas=[1.5, 0.9]", "key 'optim.betas' must be in [0, 1), got 1.5"},
      {"optim.eps=-1", "key 'optim.eps' must be a finite number >= 0"},
      {"optim.weight_decay=-1", "key 'optim.weight_decay' must be a finite number >= 0"},
      {"optim.momentum=-3", "key 'optim.momentum' must be a finite number >= 0"},
      {"optim.clip_grad=-1", "key 'optim.clip_grad' must be a finite number >= 0"},
      {"optim.initial_loss_scale=-1", "key 'optim.initial_loss_scale' must be a positive finite number"},
      {"schedule.warmup_steps=-5", "key 'schedule.warmup_steps' must be 0 or more"},
      {"schedule.decay_steps=-5", "key 'schedule.decay_steps' must be 0 or more"},
      {"schedule.min_lr=-1", "key 'schedule.min_lr' must be a finite number >= 0"},
      {"dist.data_parallel_size=-1", "key 'dist.data_parallel_size' must be 0 or more"},
      {"dist.tensor_parallel_size=0", "key 'dist.tensor_parallel_size' must be positive"},
      {"dist.pipeline_parallel_size=-2", "key 'dist.pipeline_parallel_size' must be positive"},
      {"dist.pipeline_num_layers=[2, 0]", "key 'dist.pipeline_num_layers' must be positive, got 0"},
      {"dist.virtual_pipeline_size=0", "key 'dist.virtual_pipeline_size' must be positive"},
      {"dist.zero_stage=4", "key 'dist.zero_stage' must be 0, 1, 2 or 3, got 4"},
      {"dist.timeout_s=0", "key 'dist.timeout_s' must be a positive finite number"},
      {"checkpoint.interval=-1", "key 'checkpoint.interval' must be 0 or more"},
      {"checkpoint.keep=-1", "key 'checkpoint.keep' must be 0 or more"},
      {"train.epochs=0", "key 'train.epochs' must be a positive finite number, got 0"},
      {"train.epochs=-2", "key 'train.epochs' must be a positive finite number, got -2"},
      {"train.epochs=inf", "key 'train.epochs' must be a positive finite number, got inf"},
  };
  for (const auto& [assignment, want] : bad) {
    Config c;
    const std::string msg = testing::error_message([&] { apply_override(c, assignment); });
    EXPECT_NE(msg.find("--set " + assignment + ": " + want), std::string::npos) << assignment << ": " << msg;
  }
  Config c;
  EXPECT_EQ(testing::error_message([&] { apply_toml(c, "[train]\nglobal_batch_size = -8\n", "run.toml"); }),
            "run.toml:2: key 'train.global_batch_size' must be 0 or more (0 = micro_batch_size × data_parallel_size), "
            "got -8");
  // The defaults and the documented "off"/"default" values are in range.
  EXPECT_NO_THROW(apply_toml(c, to_toml(Config{}), "defaults"));
  EXPECT_NO_THROW(load_config("", {"train.global_batch_size=0", "train.eval_interval=0", "optim.clip_grad=0",
                                   "checkpoint.keep=0", "dist.data_parallel_size=0", "model.n_layer=0",
                                   "train.seed=-1", "data.prefetch=0", "dist.zero_stage=3"}));
}

TEST(Config, ResolvedTomlRoundTrips) {
  Config c = load_config("", {"train.precision=bf16", "data.paths=[\"a b\", \"c\"]", "optim.lr=0.0003",
                              "optim.clip_grad=2", "optim.eps=1e-8", "dist.context_parallel_size=4",
                              "dist.context_parallel_algorithm=all_to_all"});
  const std::string text = to_toml(c);
  EXPECT_NE(text.find("[train]\n"), std::string::npos);
  // Floats as a person wrote them (shortest round-trip text), still TOML floats.
  EXPECT_NE(text.find("\nlr = 0.0003\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nclip_grad = 2.0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\neps = 1e-08\n"), std::string::npos) << text;
  Config back;
  apply_toml(back, text, "resolved");
  EXPECT_EQ(to_toml(back), text);
  EXPECT_EQ(back.data.paths, c.data.paths);
  EXPECT_EQ(back.optim.lr, 0.0003);
  EXPECT_EQ(back.optim.eps, 1e-8);
  EXPECT_EQ(back.dist.context_parallel_size, 4);
  EXPECT_EQ(back.dist.context_parallel_algorithm, "all_to_all");
  EXPECT_GT(config_keys().size(), 40u);
}

// A run's length is train.steps or train.epochs: both given (in a file, by --set, or one in each) is an
// error naming both; train.epochs alone keeps the resolved steps out of config.toml, which reads back.
TEST(Config, StepsAndEpochsExcludeEachOther) {
  const std::string both = testing::error_message([] { load_config("", {"train.steps=10", "train.epochs=3"}); });
  EXPECT_EQ(both, "train.steps = 10 and train.epochs = 3.0 are both given (by --set): a run's length is counted in "
                  "steps or in epochs, not both; drop one of them");
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / fmt::format("trident-epochs-{}.toml", ::getpid());
  std::ofstream(file) << "[train]\nsteps = 40\n";
  const std::string mixed = testing::error_message([&] { load_config(file.string(), {"train.epochs=2.5"}); });
  EXPECT_NE(mixed.find("train.steps = 40 and train.epochs = 2.5 are both given (by " + file.string() + " or --set)"),
            std::string::npos)
      << mixed;
  std::filesystem::remove(file);
  Config c = load_config("", {"train.epochs=2"});
  ASSERT_TRUE(c.train.epochs.has_value());
  EXPECT_EQ(*c.train.epochs, 2.0);
  c.train.steps = 37;  // as resolved at start
  const std::string text = to_toml(c);
  EXPECT_NE(text.find("\n# steps = 37: resolved from train.epochs\nepochs = 2.0\n"), std::string::npos) << text;
  Config back;
  apply_toml(back, text, "resolved");
  EXPECT_EQ(back.train.epochs, c.train.epochs);
  EXPECT_NE(to_toml(Config{}).find("\n# epochs unset: the default\n"), std::string::npos);
  EXPECT_TRUE(load_config("", {}).data.packing);
  EXPECT_FALSE(load_config("", {"data.packing=false"}).data.packing);
}

TEST(Config, TensorBoardTakesABooleanOrADirectory) {
  EXPECT_EQ(load_config("", {}).log.tensorboard, "");  // off by default
  EXPECT_EQ(load_config("", {"log.tensorboard=true"}).log.tensorboard, "tensorboard");
  EXPECT_EQ(load_config("", {"log.tensorboard=true", "log.tensorboard=false"}).log.tensorboard, "");
  EXPECT_EQ(load_config("", {"log.tensorboard=/tmp/tb"}).log.tensorboard, "/tmp/tb");  // a bare word
  EXPECT_EQ(load_config("", {"log.tensorboard=\"tb dir\""}).log.tensorboard, "tb dir");
  for (const char* value : {"false", "true", "\"/abs/tb\""}) {
    Config c = load_config("", {fmt::format("log.tensorboard={}", value)});
    Config back;
    apply_toml(back, to_toml(c), "resolved");
    EXPECT_EQ(back.log.tensorboard, c.log.tensorboard) << value;
  }
  EXPECT_NE(to_toml(Config{}).find("\ntensorboard = false\n"), std::string::npos);
  for (const char* bad : {"log.tensorboard=1", "log.tensorboard=\"\"", "log.tensorboard=[\"a\"]"}) {
    EXPECT_THROW(load_config("", {bad}), Error) << bad;
  }
}

}  // namespace
}  // namespace trident::train
