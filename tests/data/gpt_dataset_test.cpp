#include "trident/data/dataset/gpt_dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <numeric>

#include "test_util.h"
#include "trident/core/interrupt.h"
#include "trident/data/dataset/blended_dataset.h"
#include "trident/data/dataset/split.h"

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

TEST(GptDataset, TooSmallSplitNamesTheDataset) {
  TempDir dir("trident-gpt-split");
  auto ds = counting_dataset(dir / "docs", std::vector<int>(100, 20));
  GptDatasetConfig cfg;
  cfg.seq_len = 64;
  cfg.documents = parse_split("98,1,1", 100)[1];  // the validation split: one document of 20 tokens
  EXPECT_THAT(error_of([&] { GptDataset(ds, cfg); }),
              HasSubstr(fmt::format("dataset '{}': documents [98, 99) hold 20 tokens, too few for one sample of 64 + 1",
                                    dir / "docs")));
}

// Overwrites value `index` of a file in place, keeping its size.
template <typename T>
void poke(const std::filesystem::path& file, std::size_t index, T value) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(index * sizeof(T)));
  f.write(reinterpret_cast<const char*>(&value), sizeof(T));
  ASSERT_TRUE(f.good()) << file;
}

std::filesystem::path cache_file(const std::filesystem::path& dir, const std::string& suffix) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().ends_with(suffix)) return e.path();
  }
  ADD_FAILURE() << "no cache file *" << suffix;
  return {};
}

TEST(GptDataset, DamagedCacheIsAnErrorNamingTheFile) {
  TempDir dir("trident-gpt-damaged");
  const std::vector<int> lengths{5, 3, 7, 1, 9, 4, 6, 2, 8};
  auto ds = counting_dataset(dir / "c", lengths);
  GptDatasetConfig cfg;
  cfg.seq_len = 4;
  cfg.num_samples = 30;
  cfg.cache_dir = dir.path() / "cache";
  const GptIndices good = GptDataset(ds, cfg).indices();
  // Loads the cache and reads every sample: a damaged index must fail as an Error, never a wild read.
  auto load_and_read = [&] {
    GptDataset gpt(ds, cfg);
    for (std::int64_t i = 0; i < gpt.size(); ++i) gpt.sample(i);
  };
  auto restore = [&] {
    std::filesystem::remove_all(cfg.cache_dir);
    GptDataset rebuilt(ds, cfg);
  };
  const auto shuffle = cache_file(cfg.cache_dir, "-shuffle_index.bin");
  poke<std::int64_t>(shuffle, 3, std::int64_t{1} << 40);
  EXPECT_THAT(error_of(load_and_read), HasSubstr(fmt::format("'{}': entry 3 is 1099511627776, not a sample in [0, {})",
                                                             shuffle.string(), good.samples())));
  EXPECT_THAT(error_of(load_and_read), HasSubstr("-* to rebuild"));
  restore();
  const auto documents = cache_file(cfg.cache_dir, "-document_index.bin");
  poke<std::int32_t>(documents, 2, 1 << 30);
  EXPECT_THAT(
      error_of(load_and_read),
      HasSubstr(fmt::format("'{}': entry 2 is document 1073741824, not in the range [0, 9)", documents.string())));
  restore();
  const auto samples = cache_file(cfg.cache_dir, "-sample_index.bin");
  poke<std::int64_t>(samples, 2 * 5, std::int64_t{1} << 40);  // boundary 5's document position
  EXPECT_THAT(
      error_of(load_and_read),
      HasSubstr(fmt::format("'{}': sample boundary 5 is at document position 1099511627776", samples.string())));
  restore();
  poke<std::int64_t>(samples, 2 * 5 + 1, 1000);  // boundary 5's offset
  const int length = lengths[good.document_index[good.sample_index[2 * 5]]];
  EXPECT_THAT(error_of(load_and_read),
              HasSubstr(fmt::format("sample boundary 5 is at offset 1000 of a document of {} tokens", length)));
  restore();
  // A boundary moved one token on, still consistent with its neighbours, makes the
  // sample before it one token too long: sample() must stop before writing past its output.
  std::int64_t b = 1;
  while (good.sample_index[2 * b + 1] + 1 >= lengths[good.document_index[good.sample_index[2 * b]]]) ++b;
  poke<std::int64_t>(samples, 2 * b + 1, good.sample_index[2 * b + 1] + 1);
  const auto longer =
      std::find(good.shuffle_index.begin(), good.shuffle_index.end(), b - 1) - good.shuffle_index.begin();
  EXPECT_THAT(error_of([&] { GptDataset(ds, cfg).sample(longer); }),
              HasSubstr("sample " + std::to_string(longer) + " overflows its 5 tokens"));
  restore();
  // An entry whose description is not this dataset's (a hash collision, an edited file) is not used.
  const auto description = cache_file(cfg.cache_dir, "-description.txt");
  std::ofstream(description, std::ios::app) << "tampered\n";
  EXPECT_THAT(error_of(load_and_read), HasSubstr(fmt::format("index cache entry '{}' describes other indices",
                                                             description.string())));
  restore();
  EXPECT_EQ(error_of(load_and_read), "(no error)");
}

// A stop requested during a training's set-up abandons the index build at its next interruption point
// (core/interrupt.h), before anything is written: the cache directory holds no entry file, and the next
// build, unrequested, writes the whole entry. Outside an InterruptionScope (a library caller's build) a
// pending request changes nothing.
TEST(GptDataset, StopRequestAbandonsTheIndexBuild) {
  TempDir dir("trident-gpt-stop");
  auto ds = counting_dataset(dir / "c", {5, 3, 7, 1, 9, 4, 6, 2, 8});
  GptDatasetConfig cfg;
  cfg.seq_len = 4;
  cfg.num_samples = 20000;  // several interruption points' worth of samples
  cfg.cache_dir = dir / "cache";
  const auto entry_files = [&] {
    std::vector<std::string> names;
    for (const auto& f : std::filesystem::directory_iterator(cfg.cache_dir))
      if (!f.path().string().ends_with("-lock")) names.push_back(f.path().filename().string());
    return names;
  };
  request_interrupt();
  {
    const InterruptionScope scope;
    EXPECT_THROW((void)GptDataset(ds, cfg), Interrupted);
    EXPECT_THROW((void)build_blending_indices(std::vector<double>{1, 2}, 10000), Interrupted);
    EXPECT_THROW((void)ds->token_range(), Interrupted);
  }
  EXPECT_THAT(entry_files(), ::testing::IsEmpty());
  EXPECT_EQ(GptDataset(ds, cfg).size(), build_gpt_indices(ds->sequence_lengths(), {0, 9}, 4, 20000, 1234).samples());
  EXPECT_EQ(entry_files().size(), 5u);  // the three indices, their sizes and the description
  clear_interrupt();
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
