#include "trident/data/dataset/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "test_util.h"
#include "trident/data/dataset/blended_dataset.h"

namespace trident::data {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

// Sample i is [i*10, i*10 + 1, ..., i*10 + seq_len]: its content names it.
class CountingSource final : public SampleSource {
 public:
  CountingSource(std::int64_t n, std::int64_t seq_len, std::int32_t base = 0) : n_(n), s_(seq_len), base_(base) {}
  std::int64_t size() const override { return n_; }
  std::int64_t sample_tokens() const override { return s_ + 1; }
  void sample(std::int64_t i, std::int32_t* out) const override {
    for (std::int64_t k = 0; k <= s_; ++k) out[k] = base_ + static_cast<std::int32_t>(i * 10 + k);
  }
  using SampleSource::sample;

 private:
  std::int64_t n_, s_;
  std::int32_t base_;
};

TEST(Blend, ToyWeights) {
  const std::vector<double> w{0.5, 0.3, 0.2};
  const auto b = build_blending_indices(w, 10);
  EXPECT_EQ(b.dataset, (std::vector<std::int32_t>{0, 1, 2, 0, 1, 0, 2, 0, 1, 0}));
  EXPECT_EQ(b.dataset_sample, (std::vector<std::int64_t>{0, 0, 0, 1, 1, 2, 1, 3, 2, 4}));
}

TEST(Blend, DatasetReadsFromSources) {
  auto a = std::make_shared<CountingSource>(10, 3, 0);
  auto c = std::make_shared<CountingSource>(10, 3, 100000);
  BlendedDataset blend({a, c}, {3, 1}, 8);
  std::int64_t from_c = 0;
  for (std::int64_t i = 0; i < 8; ++i) from_c += blend.sample(i)[0] >= 100000;
  EXPECT_EQ(from_c, 2);
  EXPECT_THAT(error_of([&] {
                BlendedDataset({a, c}, {1, 1}, 40);
              }),
              HasSubstr("draws 20 from dataset 0, which has only 10"));
  // Default weights: proportional to sizes.
  auto small = std::make_shared<CountingSource>(5, 3, 100000);
  BlendedDataset by_size({a, small}, {}, 15);
  EXPECT_EQ(std::count(by_size.index().dataset.begin(), by_size.index().dataset.end(), 1), 5);
}

std::vector<std::int64_t> first_tokens(const Batch& b) {
  std::vector<std::int64_t> out;
  const auto* t = b.tokens.data<std::int64_t>();
  for (std::int64_t r = 0; r < b.tokens.size(0); ++r) out.push_back(t[r * b.tokens.size(1)]);
  return out;
}

TEST(Loader, TokensAndLabelsAreShiftedByOne) {
  auto src = std::make_shared<CountingSource>(7, 4);
  DataLoader loader(src, {.micro_batch_size = 2});
  const Batch b = loader.next();
  EXPECT_EQ(b.tokens.shape(), (Shape{2, 4}));
  EXPECT_EQ(b.tokens.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2, 3, 10, 11, 12, 13}));
  EXPECT_EQ(b.labels.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 3, 4, 11, 12, 13, 14}));
  EXPECT_EQ(loader.consumed_samples(), 2);
}

// Megatron's --eod-mask-loss: a label whose input token is the masked id is ignored, and trained_labels
// counts what remains in any run of the stream, epochs after the first included.
TEST(Loader, MasksTheLabelsAfterAnEndOfDocumentToken) {
  auto src = std::make_shared<CountingSource>(3, 4);  // sample i: i*10 .. i*10 + 4
  DataLoader loader(src, {.micro_batch_size = 2, .prefetch = 0, .masked_input_token = 12});
  const Batch b = loader.next();
  EXPECT_EQ(b.tokens.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2, 3, 10, 11, 12, 13}));
  EXPECT_EQ(b.labels.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 3, 4, 11, 12, kIgnoreLabel, 14}));
  EpochOrder order(src->size(), 1234);
  EXPECT_EQ(trained_labels(*src, order, 0, 2, 12), 7);
  EXPECT_EQ(trained_labels(*src, order, 0, 2, -1), 8);
  EXPECT_EQ(trained_labels(*src, order, 2, 1, 12), 4);  // sample 2 holds no 12
  // Sample 14 is in the fifth epoch (a shuffled one): sample 1 is met once in every epoch.
  EXPECT_EQ(trained_labels(*src, order, 0, 15, 12), 15 * 4 - 5);
  // The token 14 is the last of sample 1: a label target, never an input.
  EXPECT_EQ(trained_labels(*src, order, 0, 3, 14), 12);
}

// Megatron's --reset-attention-mask / --reset-position-ids: the document starts of each sample's inputs,
// a document running to its end-of-document token inclusive; none without document_end_token.
TEST(Loader, DocumentStartsSplitSamplesAfterEndOfDocumentTokens) {
  auto src = std::make_shared<CountingSource>(3, 6);  // sample i: i*10 .. i*10 + 6
  EXPECT_FALSE(DataLoader(src, {.micro_batch_size = 2, .prefetch = 0}).next().document_starts.defined());
  for (std::int64_t eod : {0, 2, 12, 15, 16}) {
    DataLoader loader(src, {.micro_batch_size = 2, .prefetch = 0, .document_end_token = eod});
    const Batch b = loader.next();
    ASSERT_EQ(b.document_starts.shape(), (Shape{2, 6}));
    ASSERT_EQ(b.document_starts.dtype(), DType::i32);
    // Inputs 0..5 and 10..15: a document ends at `eod` and the next input opens one (16 is a label only).
    std::vector<std::int32_t> want = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    const auto open_after = [&](std::int64_t row, std::int64_t k) {
      for (std::int64_t j = k + 1; j < 6; ++j) want[static_cast<std::size_t>(row * 6 + j)] = static_cast<std::int32_t>(k + 1);
    };
    if (eod < 6) open_after(0, eod);
    if (eod >= 10 && eod < 16) open_after(1, eod - 10);
    EXPECT_EQ(b.document_starts.to_vector<std::int32_t>(), want) << "end-of-document id " << eod;
  }
}

TEST(Loader, DataParallelSlicesUnionToTheSingleRankBatch) {
  auto src = std::make_shared<CountingSource>(13, 2);  // 13: epochs roll over mid-batch
  const std::int64_t global_micro = 8, steps = 6;
  // dp = 1 reads global micro-batches of 8 whole.
  DataLoader single(src, {.micro_batch_size = global_micro, .dp_rank = 0, .dp_size = 1, .seed = 5});
  std::vector<std::vector<std::int64_t>> want;
  for (int s = 0; s < steps; ++s) want.push_back(first_tokens(single.next()));
  for (int dp : {2, 4}) {
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int d = 0; d < dp; ++d) {
      ranks.push_back(std::make_unique<DataLoader>(
          src, LoaderOptions{.micro_batch_size = global_micro / dp, .dp_rank = d, .dp_size = dp, .seed = 5}));
    }
    for (int s = 0; s < steps; ++s) {
      std::vector<std::int64_t> got;
      for (auto& r : ranks) {
        const auto part = first_tokens(r->next());
        got.insert(got.end(), part.begin(), part.end());
      }
      EXPECT_EQ(got, want[s]) << "dp " << dp << " step " << s;
    }
  }
}

TEST(Loader, EpochsRollOverWithAFreshShuffle) {
  auto src = std::make_shared<CountingSource>(6, 1);
  DataLoader loader(src, {.micro_batch_size = 6, .seed = 3});
  const auto e0 = first_tokens(loader.next()), e1 = first_tokens(loader.next()), e2 = first_tokens(loader.next());
  EXPECT_EQ(e0, (std::vector<std::int64_t>{0, 10, 20, 30, 40, 50}));  // epoch 0: the source's own order
  for (const auto& e : {e1, e2}) {
    auto sorted = e;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, e0);  // every epoch is a permutation of all samples
  }
  EXPECT_NE(e1, e2);
}

TEST(Loader, ResumeContinuesTheExactStream) {
  auto src = std::make_shared<CountingSource>(11, 3);
  for (int prefetch : {0, 3}) {
    DataLoader full(src, {.micro_batch_size = 2, .dp_rank = 1, .dp_size = 2, .seed = 9, .prefetch = prefetch});
    std::vector<std::vector<std::int64_t>> stream;
    for (int s = 0; s < 20; ++s) stream.push_back(first_tokens(full.next()));
    for (int n : {0, 4, 12, 24}) {  // consumed global samples (a multiple of 2 x 2)
      DataLoader resumed(
          src,
          {.micro_batch_size = 2, .dp_rank = 1, .dp_size = 2, .consumed_samples = n, .seed = 9, .prefetch = prefetch});
      for (int s = n / 4; s < 20; ++s) EXPECT_EQ(first_tokens(resumed.next()), stream[s]) << "resume at " << n;
    }
  }
  EXPECT_THAT(error_of([&] { DataLoader(src, {.micro_batch_size = 2, .dp_size = 2, .consumed_samples = 6}); }),
              HasSubstr("not a multiple of the global micro-batch 4"));
  EXPECT_THAT(error_of([&] { DataLoader(src, {.micro_batch_size = 2, .dp_rank = 2, .dp_size = 2}); }),
              HasSubstr("dp_rank 2 is not in [0, dp_size = 2)"));
}

TEST(Loader, ZeroMicroBatchOrDataParallelSizeIsAnError) {
  // Both once reached `consumed_samples % (micro_batch_size * dp_size)` unchecked: SIGFPE.
  auto src = std::make_shared<CountingSource>(7, 4);
  EXPECT_THAT(error_of([&] { DataLoader(src, {.micro_batch_size = 0}); }),
              HasSubstr("micro_batch_size 0 must be positive"));
  EXPECT_THAT(error_of([&] { DataLoader(src, {.dp_size = 0}); }), HasSubstr("dp_size = 0"));
}

}  // namespace
}  // namespace trident::data
