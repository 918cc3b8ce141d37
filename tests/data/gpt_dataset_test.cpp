#include "trident/data/gpt_dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>

#include "test_util.h"
#include "trident/data/split.h"

namespace trident::data {
namespace {

using testing::error_of;
using testing::TempDir;
using ::testing::HasSubstr;

TEST(GptDataset, ToySampleIndex) {
  // Document lengths 5, 3, 7 and seq_len 4: samples of 5 tokens start at
  // (0,0), (0,4), (2,0), (2,4) — each sample starts on the last token of the previous.
  const std::vector<std::int32_t> sizes{5, 3, 7};
  const std::vector<std::int32_t> doc_index{0, 1, 2};
  const auto si = build_sample_index(sizes, doc_index, 4, 3);
  EXPECT_EQ(si, (std::vector<std::int64_t>{0, 0, 0, 4, 2, 0, 2, 4}));
  // One epoch of 15 tokens holds (15 - 1) / 4 = 3 samples.
  const auto ix = build_gpt_indices(sizes, {0, 3}, 4, 0, 1);
  EXPECT_EQ(ix.samples(), 3);
  std::vector<std::int64_t> sorted = ix.shuffle_index;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::int64_t>{0, 1, 2}));
}

// Writes documents whose tokens are consecutive integers, so a sample's
// content shows exactly which documents and offsets it spans.
std::shared_ptr<const IndexedDataset> counting_dataset(const std::string& prefix, const std::vector<int>& lengths) {
  IndexedDatasetBuilder b(prefix, TokenDType::u16);
  std::int32_t next = 0;
  for (int len : lengths) {
    std::vector<std::int32_t> doc(static_cast<std::size_t>(len));
    std::iota(doc.begin(), doc.end(), next);
    next += len;
    b.add_document(doc);
  }
  b.finalize();
  return IndexedDataset::open(prefix);
}

TEST(GptDataset, SamplesCrossDocumentsAndCoverEpochs) {
  TempDir dir("trident-gpt");
  const std::vector<int> lengths{5, 3, 7, 1, 9, 4, 6, 2, 8};
  auto ds = counting_dataset(dir / "c", lengths);
  GptDatasetConfig cfg;
  cfg.seq_len = 4;
  cfg.num_samples = 30;  // 45 tokens per epoch: needs 3 epochs
  cfg.seed = 7;
  GptDataset gpt(ds, cfg);
  EXPECT_GE(gpt.size(), 30);
  const auto& ix = gpt.indices();
  EXPECT_EQ(ix.document_index.size(), 3 * lengths.size());
  for (std::int64_t i = 0; i < gpt.size(); ++i) {
    const auto s = gpt.sample(i);
    ASSERT_EQ(s.size(), 5u);
    // Rebuild the expected window by walking the document index.
    const std::int64_t j = ix.shuffle_index[i];
    std::vector<std::int32_t> want;
    std::int64_t pos = ix.sample_index[2 * j], off = ix.sample_index[2 * j + 1];
    while (static_cast<std::int64_t>(want.size()) < 5) {
      const auto seq = ds->sequence(ix.document_index[pos]);
      for (std::size_t k = off; k < seq.size() && want.size() < 5; ++k) want.push_back(seq[k]);
      ++pos;
      off = 0;
    }
    EXPECT_EQ(s, want) << "sample " << i;
  }
  // The document index holds every document once per epoch (shuffled as a whole, as Megatron does).
  for (std::int32_t d = 0; d < 9; ++d) EXPECT_EQ(std::count(ix.document_index.begin(), ix.document_index.end(), d), 3);
  // Same seed, same indices; another seed, another order.
  GptDataset again(ds, cfg);
  EXPECT_EQ(again.indices().shuffle_index, ix.shuffle_index);
  cfg.seed = 8;
  EXPECT_NE(GptDataset(ds, cfg).indices().shuffle_index, ix.shuffle_index);
}

TEST(GptDataset, CacheIsBuiltOnceUnderConcurrentProcesses) {
  TempDir dir("trident-gpt-cache");
  std::vector<int> lengths;
  for (int i = 0; i < 2000; ++i) lengths.push_back(1 + (i * 37) % 50);
  auto ds = counting_dataset(dir / "c", lengths);
  GptDatasetConfig cfg;
  cfg.seq_len = 16;
  cfg.num_samples = 20000;
  cfg.cache_dir = dir.path() / "cache";
  constexpr int kProcs = 4;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 3;
      try {
        GptDataset gpt(ds, cfg);
        const auto s = gpt.sample(123);
        code = (gpt.built_cache() ? 1 : 0) | (s.size() == 17 ? 0 : 2);
      } catch (...) {
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  int built = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    const int code = WEXITSTATUS(status);
    ASSERT_LE(code, 1) << "a child failed";
    built += code;
  }
  EXPECT_EQ(built, 1) << "exactly one process builds the cache";
  GptDataset loaded(ds, cfg);
  EXPECT_FALSE(loaded.built_cache());
  cfg.cache_dir.clear();
  GptDataset fresh(ds, cfg);
  EXPECT_EQ(loaded.indices().shuffle_index, fresh.indices().shuffle_index);
  EXPECT_EQ(loaded.indices().sample_index, fresh.indices().sample_index);
  EXPECT_EQ(loaded.indices().document_index, fresh.indices().document_index);
}

TEST(GptDataset, BadConfigurations) {
  TempDir dir("trident-gpt-bad");
  auto ds = counting_dataset(dir / "c", {3, 2});
  GptDatasetConfig cfg;
  cfg.seq_len = 8;
  EXPECT_THAT(error_of([&] { GptDataset(ds, cfg); }), HasSubstr("hold 5 tokens, too few for one sample of 8 + 1"));
  cfg.seq_len = 2;
  cfg.documents = {1, 5};
  EXPECT_THAT(error_of([&] { GptDataset(ds, cfg); }), HasSubstr("document range [1, 5) is not within"));
}

TEST(Split, MegatronSplitString) {
  const auto s = parse_split("98,1,1", 1000);
  EXPECT_EQ(s[0], (DocumentRange{0, 980}));
  EXPECT_EQ(s[1], (DocumentRange{980, 990}));
  EXPECT_EQ(s[2], (DocumentRange{990, 1000}));
  const auto t = parse_split("2/1", 10);  // padded with 0: 2/3, 1/3, 0
  EXPECT_EQ(t[0], (DocumentRange{0, 7}));
  EXPECT_EQ(t[1], (DocumentRange{7, 10}));
  EXPECT_EQ(t[2], (DocumentRange{10, 10}));
  // Rounding pushes the total past N: the boundaries shift back (Megatron's diff).
  const auto u = parse_split("1,1,1", 5);  // round(5/3) = 2 each -> 6 -> shifted by 1
  EXPECT_EQ(u[0], (DocumentRange{0, 1}));
  EXPECT_EQ(u[2].end, 5);
  EXPECT_THAT(error_of([] { parse_split("98,x,1", 10); }), HasSubstr("'x' is not a non-negative number"));
  EXPECT_THAT(error_of([] { parse_split("1,1,1,1", 10); }), HasSubstr("has 4 parts"));
  EXPECT_EQ(weighted_range(1000, 0.0, 0.9), (DocumentRange{0, 900}));
  EXPECT_EQ(weighted_range(10, 0.9, 1.0), (DocumentRange{9, 10}));
  EXPECT_THAT(error_of([] { weighted_range(10, 0.5, 0.2); }), HasSubstr("must satisfy"));
}

}  // namespace
}  // namespace trident::data
