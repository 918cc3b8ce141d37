// models/pretrained.h in one process: save_pretrained's two kinds of directory (merged: a Hugging
// Face directory; sharded: meta.json and one file per rank) and from_pretrained reading either back
// exactly; pipeline stages saved and loaded separately; the errors a user sees. The layouts of
// several ranks are tests/train/parallel_model_test.cpp's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "trident/checkpoint/safetensors.h"
#include "trident/core/error.h"
#include "trident/dist/self_communicator.h"
#include "trident/models/pretrained.h"
#include "testing/torch_zip.h"

namespace trident::models {
namespace {

namespace fs = std::filesystem;

class PretrainedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("trident-pretrained-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    model_ = std::make_unique<TransformerLM>(preset("gpt2-tiny"));
    model_->initialize(42);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static void expect_same(const TransformerLM& a, const TransformerLM& b) {
    const auto pa = a.parameters(), pb = b.parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (std::size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i]->name, pb[i]->name);
      EXPECT_EQ(pa[i]->var.data().to_vector<float>(), pb[i]->var.data().to_vector<float>()) << pa[i]->name;
    }
  }

  fs::path dir_;
  std::unique_ptr<TransformerLM> model_;
};

TEST_F(PretrainedTest, MergedSaveIsAHuggingFaceDirectoryThatReadsBackExactly) {
  const auto world = dist::self_communicator();
  const auto files = save_pretrained({model_.get()}, path("merged"), *world);
  EXPECT_EQ(files, (std::vector<std::string>{"model.safetensors", "config.json"}));
  EXPECT_FALSE(is_sharded_save(path("merged")));
  EXPECT_FALSE(fs::exists(path("merged.pieces")));  // the ranks' pieces are gone once merged
  // The same file save_hf writes from the whole model.
  save_hf(*model_, path("hf"));
  const auto merged = checkpoint::SafetensorsFile::open(path("merged/model.safetensors"));
  const auto plain = checkpoint::SafetensorsFile::open(path("hf/model.safetensors"));
  EXPECT_EQ(merged.names(), plain.names());
  for (const auto& name : plain.names())
    EXPECT_EQ(merged.tensor(name).to_vector<float>(), plain.tensor(name).to_vector<float>()) << name;
  expect_same(*from_pretrained(path("merged")), *model_);
}

TEST_F(PretrainedTest, ShardedSaveHasOneFilePerRankAndReadsBackExactly) {
  const auto world = dist::self_communicator();
  const auto files = save_pretrained({model_.get()}, path("sharded"), *world, {}, {.merged = false});
  EXPECT_EQ(files, (std::vector<std::string>{"config.json", "shard-00000.safetensors", "meta.json"}));
  EXPECT_TRUE(is_sharded_save(path("sharded")));
  EXPECT_EQ(pretrained_spec(path("sharded")).n_layer, model_->spec().n_layer);
  expect_same(*from_pretrained(path("sharded")), *model_);
  // Saving again replaces the directory whole.
  model_->initialize(7);
  save_pretrained({model_.get()}, path("sharded"), *world, {}, {.merged = false});
  expect_same(*from_pretrained(path("sharded")), *model_);
}

TEST_F(PretrainedTest, MergedSaveSplitsFilesAboveTheLimit) {
  const auto world = dist::self_communicator();
  const auto files = save_pretrained({model_.get()}, path("split"), *world, {}, {.max_shard_bytes = 100'000});
  EXPECT_GT(files.size(), 3u);
  EXPECT_TRUE(fs::exists(path("split/model.safetensors.index.json")));
  expect_same(*from_pretrained(path("split")), *model_);
}

TEST_F(PretrainedTest, StagesSavedTogetherLoadWholeAndWholeLoadsIntoStages) {
  // Two pipeline stages held by one rank (as an interleaved schedule's chunks are): each writes its
  // own layers; the tied LM head (the last stage's copy of the embedding) is not written twice.
  const TransformerSpec spec = preset("gpt2-tiny");
  const auto ranges = partition_layers(spec.n_layer, 2);
  TransformerLM first(spec, {}, ranges[0]), last(spec, {}, ranges[1]);
  first.initialize(42);
  last.initialize(42);
  const auto world = dist::self_communicator();
  save_pretrained({&first, &last}, path("stages"), *world);
  expect_same(*from_pretrained(path("stages")), *model_);
  const auto back = from_pretrained(path("stages"), {}, ranges[1]);
  expect_same(*back, last);
}

// transformers' pytorch_model.bin (torch.save's zip of a state dict; testing/torch_zip.h writes it as
// torch does, the tied head a view of the embedding's storage): alone, sharded with its index, in bf16,
// and beside safetensors, which wins.
TEST_F(PretrainedTest, PytorchModelBinLoadsAsSafetensorsDo) {
  save_hf(*model_, path("hf"));
  const auto st = checkpoint::SafetensorsFile::open(path("hf/model.safetensors"));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : st.names()) tensors.emplace_back(name, st.tensor(name));
  tensors.emplace_back("lm_head.weight", st.tensor("transformer.wte.weight"));
  const std::map<std::string, std::string> tied = {{"lm_head.weight", "transformer.wte.weight"}};
  auto bin_dir = [&](const std::string& name) {
    fs::create_directories(path(name));
    fs::copy_file(path("hf/config.json"), path(name + "/config.json"));
    return path(name);
  };
  testing::write_state_dict(bin_dir("bin") + "/pytorch_model.bin", tensors, tied);
  expect_same(*from_pretrained(path("bin")), *model_);

  // Sharded: pytorch_model-0000k-of-00002.bin and pytorch_model.bin.index.json.
  bin_dir("sharded");
  const std::size_t half = tensors.size() / 2;
  nlohmann::json weight_map;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    weight_map[tensors[i].first] = i < half ? "pytorch_model-00001-of-00002.bin" : "pytorch_model-00002-of-00002.bin";
  testing::write_state_dict(path("sharded/pytorch_model-00001-of-00002.bin"),
                            {tensors.begin(), tensors.begin() + half});
  testing::write_state_dict(path("sharded/pytorch_model-00002-of-00002.bin"),
                            {tensors.begin() + half, tensors.end()});
  std::ofstream(path("sharded/pytorch_model.bin.index.json")) << nlohmann::json{{"weight_map", weight_map}}.dump();
  expect_same(*from_pretrained(path("sharded")), *model_);

  // bf16 weights read as the bf16 safetensors export reads.
  std::vector<std::pair<std::string, Tensor>> bf16;
  for (const auto& [name, t] : tensors) bf16.emplace_back(name, t.to(DType::bf16));
  testing::write_state_dict(bin_dir("bf16") + "/pytorch_model.bin", bf16, tied);
  save_hf(*model_, path("hf-bf16"), DType::bf16);
  expect_same(*from_pretrained(path("bf16")), *from_pretrained(path("hf-bf16")));

  // Beside model.safetensors the .bin (here another model's) is not read.
  TransformerLM other(preset("gpt2-tiny"));
  other.initialize(7);
  save_hf(other, path("both"));
  testing::write_state_dict(path("both/pytorch_model.bin"), tensors, tied);
  expect_same(*from_pretrained(path("both")), other);

  fs::create_directories(path("empty"));
  fs::copy_file(path("hf/config.json"), path("empty/config.json"));
  try {
    from_pretrained(path("empty"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("empty' has no weights: expected model.safetensors, model.safetensors.index.json, "
                               "pytorch_model.bin or pytorch_model.bin.index.json"),
              std::string::npos)
        << e.message();
  }
}

// BERT's pytorch_model.bin files converted from TensorFlow name the norms LayerNorm.gamma and .beta;
// transformers reads them as .weight and .bias, and so does trident.
TEST_F(PretrainedTest, LegacyLayerNormNamesLoad) {
  TransformerLM bert(preset("bert-tiny"));
  bert.initialize(3);
  save_hf(bert, path("hf"));
  const auto st = checkpoint::SafetensorsFile::open(path("hf/model.safetensors"));
  std::vector<std::pair<std::string, Tensor>> tensors;
  int renamed = 0;
  for (std::string name : st.names()) {
    const Tensor t = st.tensor(name);
    for (auto [now, then] : {std::pair{std::string("LayerNorm.weight"), std::string("LayerNorm.gamma")},
                             {std::string("LayerNorm.bias"), std::string("LayerNorm.beta")}}) {
      if (name.ends_with(now)) {
        name = name.substr(0, name.size() - now.size()) + then;
        ++renamed;
      }
    }
    tensors.emplace_back(name, t);
  }
  ASSERT_GT(renamed, 2);
  fs::create_directories(path("bin"));
  fs::copy_file(path("hf/config.json"), path("bin/config.json"));
  testing::write_state_dict(path("bin/pytorch_model.bin"), tensors);
  expect_same(*from_pretrained(path("bin")), bert);
}

// The tensors a file holds that the model does not read are named, as transformers names them; the buffers
// transformers skips silently, a tied head stored beside its embedding, TensorFlow-era norm names and both of
// BERT's decoder biases are not.
TEST_F(PretrainedTest, UnusedTensorsAreNamedButNotBuffersTiedHeadsOrAlternativeNames) {
  TransformerLM bert(preset("bert-tiny"));
  bert.initialize(3);
  ASSERT_FALSE(bert.spec().pooler);
  save_hf(bert, path("bert"));
  EXPECT_EQ(unused_hf_tensors(bert.spec(), path("bert")), std::vector<std::string>{});
  const auto st = checkpoint::SafetensorsFile::open(path("bert/model.safetensors"));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (std::string name : st.names()) {
    if (name.ends_with("LayerNorm.weight")) name = name.substr(0, name.size() - 6) + "gamma";
    tensors.emplace_back(name, st.tensor(name.ends_with("gamma") ? name.substr(0, name.size() - 5) + "weight" : name));
  }
  const Tensor square = Tensor::zeros(Shape{bert.spec().d_model, bert.spec().d_model}, DType::f32);
  tensors.emplace_back("bert.embeddings.position_ids", Tensor::zeros(Shape{1, 8}, DType::f32));
  tensors.emplace_back("bert.pooler.dense.weight", square);  // a BertModel's pooler, which BertForMaskedLM lacks
  tensors.emplace_back("classifier.weight", square);
  fs::create_directories(path("bert-bin"));
  fs::copy_file(path("bert/config.json"), path("bert-bin/config.json"));
  testing::write_state_dict(path("bert-bin/pytorch_model.bin"), tensors);
  EXPECT_EQ(unused_hf_tensors(bert.spec(), path("bert-bin")),
            (std::vector<std::string>{"bert.pooler.dense.weight", "classifier.weight"}));

  TransformerLM gpt(preset("gpt2-tiny"));
  gpt.initialize(4);
  ASSERT_TRUE(gpt.spec().tie_embeddings);
  save_hf(gpt, path("gpt"));
  const auto gst = checkpoint::SafetensorsFile::open(path("gpt/model.safetensors"));
  std::vector<std::pair<std::string, Tensor>> gpt_tensors;
  for (const std::string& name : gst.names()) gpt_tensors.emplace_back(name, gst.tensor(name));
  gpt_tensors.emplace_back("lm_head.weight", gst.tensor("transformer.wte.weight"));  // torch.save keeps the tie
  gpt_tensors.emplace_back("transformer.h.0.attn.bias", Tensor::zeros(Shape{1, 1, 8, 8}, DType::f32));
  gpt_tensors.emplace_back("transformer.h.0.attn.masked_bias", Tensor::zeros(Shape{1}, DType::f32));
  fs::create_directories(path("gpt-bin"));
  fs::copy_file(path("gpt/config.json"), path("gpt-bin/config.json"));
  testing::write_state_dict(path("gpt-bin/pytorch_model.bin"), gpt_tensors);
  EXPECT_EQ(unused_hf_tensors(gpt.spec(), path("gpt-bin")), std::vector<std::string>{});
  expect_same(*from_pretrained(path("gpt-bin")), gpt);
}

TEST_F(PretrainedTest, ErrorsNameTheDirectoryAndTheTensor) {
  const auto world = dist::self_communicator();
  try {
    from_pretrained(path("absent"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent' is not a model directory"), std::string::npos) << e.what();
  }
  // A sharded save of a smaller model has no tensor for the bigger one's extra layer.
  TransformerSpec small = preset("gpt2-tiny");
  small.n_layer = 1;
  TransformerLM one(small);
  one.initialize(1);
  save_pretrained({&one}, path("small"), *world, {}, {.merged = false});
  TransformerLM two(preset("gpt2-tiny"));
  two.initialize(1);
  try {
    load_pretrained(two, path("small"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tensor 'model/transformer.h.1."), std::string::npos) << e.what();
  }
  try {
    save_pretrained({}, path("nothing"), *world);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no model chunk"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path("nothing")));
}

}  // namespace
}  // namespace trident::models
