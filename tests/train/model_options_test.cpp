// The table of model options (train/config/model_options.h): the keys it registers, the spec it builds, the keys
// model.from_pretrained refuses and the fields a resume compares.
#include "trident/train/config/model_options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "trident/models/family.h"
#include "trident/train/setup.h"

namespace trident::train {
namespace {

models::TransformerSpec spec_of(const std::vector<std::string>& overrides, std::int64_t tokenizer_vocab = 300,
                                std::int64_t seq_len = 32) {
  return detail::model_spec(load_config("", overrides).model, tokenizer_vocab, seq_len);
}

TEST(ModelOptions, EveryRowWithAKeyIsAConfigKeyInTheTablesOrder) {
  std::vector<std::string> rows, keys;
  for (const ModelOption& o : model_options())
    if (o.unset != Unset::no_key) rows.push_back("model." + o.name);
  for (const ConfigKey& k : config_keys())
    if (k.key.starts_with("model.")) keys.push_back(k.key);
  EXPECT_EQ(keys, rows);
  EXPECT_EQ(keys.front(), "model.arch");
  EXPECT_EQ(keys.back(), "model.init_std");
}

// Beside the training options, model.sparse_attention.*: a pretrained dense model fine-tuned with block-sparse
// attention (DeepSpeed's sparse BERT), which config.json has no key for.
TEST(ModelOptions, FromPretrainedMaySetTheTrainingOptionsOnly) {
  std::set<std::string> settable;
  for (const ModelOption& o : model_options())
    if (o.pretrained_may_set && !o.name.starts_with("sparse_attention.")) settable.insert(o.name);
  EXPECT_EQ(settable, (std::set<std::string>{"from_pretrained", "from_pretrained_strict", "dropout", "attention_dropout",
                                             "make_vocab_size_divisible_by", "init_std", "moe_aux_loss_coef",
                                             "moe_z_loss_coef", "moe_capacity_factor"}));
  std::size_t sparse = 0;
  for (const ModelOption& o : model_options()) sparse += o.name.starts_with("sparse_attention.") && o.pretrained_may_set;
  EXPECT_EQ(sparse, 14u);
}

TEST(ModelOptions, AResumeMatchesTheModelNotTheTraining) {
  std::vector<std::string> matched;
  for (const ModelOption& o : model_options())
    if (o.resume_must_match) matched.push_back(o.name);
  for (const std::string name : {"arch", "n_layer", "d_ff", "vocab_size", "rope_theta", "norm_eps", "moe_d_ff",
                                 "qkv_bias", "rope_scaling.factor"})
    EXPECT_NE(std::find(matched.begin(), matched.end(), name), matched.end()) << name;
  for (const std::string name : {"preset", "from_pretrained", "dropout", "attention_dropout", "init_std",
                                 "moe_aux_loss_coef"})
    EXPECT_EQ(std::find(matched.begin(), matched.end(), name), matched.end()) << name;
}

// A key that may be absent is left out of config.toml until given, and then reads back.
TEST(ModelOptions, AbsentKeysAreCommentedOutUntilGiven) {
  Config c;
  EXPECT_NE(to_toml(c).find("# tie_embeddings unset: the default\n"), std::string::npos);
  EXPECT_EQ(key_value(c, "model.moe_norm_topk_prob"), "");
  set_key(c, "model.tie_embeddings", "true", "test");
  EXPECT_NE(to_toml(c).find("tie_embeddings = true\n"), std::string::npos);
  Config back;
  apply_toml(back, to_toml(c), "config.toml");
  EXPECT_EQ(to_toml(back), to_toml(c));
  EXPECT_TRUE(back.model.given.contains("tie_embeddings"));
}

// Preset, then the keys, then what the family or the run derives: today's precedence.
TEST(ModelOptions, TheSpecIsThePresetThenTheKeysThenTheDerivedSizes) {
  const models::TransformerSpec tiny = spec_of({"model.preset=llama-tiny", "model.norm_eps=0.001"});
  EXPECT_EQ(tiny.n_kv_head, 2);         // the preset's, model.n_head not given
  EXPECT_EQ(tiny.norm_eps, 1e-6);       // the preset's: norm_eps applies without a preset only
  EXPECT_EQ(tiny.vocab_size, 300);      // the tokenizer's
  EXPECT_EQ(tiny.max_seq_len, 128);     // the preset's
  EXPECT_EQ(tiny.rope.theta, 10000.0);  // model.rope_theta's default, always applied
  EXPECT_FALSE(tiny.tie_embeddings);
  EXPECT_EQ(spec_of({"model.preset=llama-tiny", "model.n_head=8"}).n_kv_head, 8);  // follows n_head
  EXPECT_EQ(spec_of({"model.preset=llama-tiny", "model.d_model=128"}).d_ff, models::family("llama").default_d_ff(128));
  EXPECT_TRUE(spec_of({"model.preset=llama-tiny", "model.tie_embeddings=true"}).tie_embeddings);

  const models::TransformerSpec keyed = spec_of(
      {"model.arch=llama", "model.n_layer=2", "model.n_head=4", "model.d_model=64", "model.vocab_size=320"});
  EXPECT_EQ(keyed.norm_eps, 1e-5);  // the key's default
  EXPECT_EQ(keyed.max_seq_len, models::family("llama").defaults().max_seq_len);  // the family's
  EXPECT_EQ(keyed.vocab_size, 320);  // the key over the tokenizer
  EXPECT_EQ(keyed.d_ff, models::family("llama").default_d_ff(64));
  EXPECT_EQ(keyed.n_kv_head, 4);

  const models::TransformerSpec moe = spec_of({"model.preset=mixtral-tiny", "model.moe_capacity_factor=1.5"});
  EXPECT_EQ(moe.moe_capacity_factor, 1.5);
  EXPECT_EQ(moe.moe_aux_loss_coef, models::preset("mixtral-tiny").moe_aux_loss_coef);  // absent: the preset's
}

// model.attention_dropout: unset, the preset's (0) or the pretrained model's config.json's (BERT's
// attention_probs_dropout_prob); given, the key's, over config.json's too.
TEST(ModelOptions, AttentionDropoutIsTheKeysElseThePresetsOrConfigJsons) {
  EXPECT_EQ(spec_of({"model.preset=bert-tiny"}).attention_dropout, 0.0);
  EXPECT_EQ(spec_of({"model.preset=bert-tiny", "model.attention_dropout=0.1"}).attention_dropout, 0.1);
  EXPECT_EQ(spec_of({"model.preset=gpt2-tiny", "model.attention_dropout=0.2"}).attention_dropout, 0.2);
  const std::string dir = ::testing::TempDir() + "/attention_dropout_bert";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json")
      << R"({"model_type": "bert", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 16,
             "intermediate_size": 64, "vocab_size": 300, "attention_probs_dropout_prob": 0.15})";
  EXPECT_EQ(spec_of({"model.from_pretrained=" + dir}).attention_dropout, 0.15);
  EXPECT_EQ(spec_of({"model.from_pretrained=" + dir, "model.attention_dropout=0"}).attention_dropout, 0.0);
  std::filesystem::remove_all(dir);
}

// Issue 48: a preset with explicit size keys in the same file: the keys win, and one line says so; a
// --set model.preset is later and more explicit than the file: it replaces the file's model, and --set
// size keys still apply on top of it.
TEST(ModelOptions, APresetAgainstExplicitKeysSaysWhichWins) {
  const std::string path = ::testing::TempDir() + "/preset_and_keys.toml";
  {
    std::ofstream f(path);
    f << "[model]\npreset = \"gpt2\"\nn_layer = 2\nn_head = 2\nd_model = 64\n";
  }
  std::vector<std::string> notes;
  const Config same_file = load_config(path, {}, &notes);
  EXPECT_EQ(detail::model_spec(same_file.model, 300, 32).n_layer, 2);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "model.preset 'gpt2' and explicit keys set the same sizes; the explicit keys win: model.n_layer = "
                      "2 (the preset's 12), model.n_head = 2 (the preset's 12), model.d_model = 64 (the preset's 768)");

  {
    std::ofstream f(path);
    f << "[model]\narch = \"llama\"\nn_layer = 2\nn_head = 2\nd_model = 64\n";
  }
  notes.clear();
  const Config replaced = load_config(path, {"model.preset=llama2-7b"}, &notes);
  const models::TransformerSpec big = detail::model_spec(replaced.model, 300, 32);
  EXPECT_EQ(big.n_layer, models::preset("llama2-7b").n_layer);
  EXPECT_EQ(big.d_model, models::preset("llama2-7b").d_model);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "--set model.preset=llama2-7b: the preset replaces the model of " + path +
                          ", whose model.arch = 'llama', model.n_layer = 2, model.n_head = 2, model.d_model = 64 are "
                          "dropped (a --set is later and more explicit than the file; --set a key to keep it)");
  // A --set size key still applies on top, whatever its place among the --set options.
  notes.clear();
  const Config mixed = load_config(path, {"model.n_layer=3", "model.preset=llama2-7b"}, &notes);
  EXPECT_EQ(detail::model_spec(mixed.model, 300, 32).n_layer, 3);
  EXPECT_EQ(detail::model_spec(mixed.model, 300, 32).d_model, models::preset("llama2-7b").d_model);
}

}  // namespace
}  // namespace trident::train
