// models/pretrained.h in one process: save_pretrained's two kinds of directory (merged: a Hugging
// Face directory; sharded: meta.json and one file per rank) and from_pretrained reading either back
// exactly; pipeline stages saved and loaded separately; the errors a user sees. The layouts of
// several ranks are tests/train/parallel_model_test.cpp's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "trident/checkpoint/safetensors.h"
#include "trident/core/error.h"
#include "trident/dist/self_communicator.h"
#include "trident/models/pretrained.h"

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
