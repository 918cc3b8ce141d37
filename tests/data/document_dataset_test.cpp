// One padded document per sample (data/dataset/document_dataset.h) and what the loader makes of it:
// truncation keeping the closing tokens, the per-epoch document order, the key mask, the ignored labels
// and the counts of real tokens and trained labels (data/dataset/loader.h).
#include "trident/data/dataset/document_dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "test_util.h"
#include "trident/data/dataset/blended_dataset.h"
#include "trident/data/dataset/loader.h"

namespace trident::data {
namespace {

using testing::error_of;
using testing::TempDir;
using ::testing::HasSubstr;

// Document d holds tokens 100·(d + 1), 100·(d + 1) + 1, ...: a sample's content names its document.
std::shared_ptr<const IndexedDataset> named_documents(const std::string& prefix, const std::vector<int>& lengths) {
  IndexedDatasetBuilder b(prefix, TokenDType::u16);
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    std::vector<std::int32_t> doc(static_cast<std::size_t>(lengths[d]));
    std::iota(doc.begin(), doc.end(), static_cast<std::int32_t>(100 * (d + 1)));
    b.add_document(doc);
  }
  b.finalize();
  return IndexedDataset::open(prefix);
}

std::int64_t document_of(const std::vector<std::int32_t>& sample) { return sample[0] / 100 - 1; }

TEST(DocumentDataset, PadsShortDocumentsAndCutsLongOnesKeepingTheirEnd) {
  TempDir dir("trident-docs");
  auto ds = named_documents(dir / "d", {3, 5, 8});
  DocumentDataset docs(ds, {.sample_tokens = 5, .pad_id = 7, .keep_last = 1, .seed = 3});
  ASSERT_EQ(docs.size(), 3);
  EXPECT_TRUE(docs.padded());
  for (std::int64_t i = 0; i < docs.size(); ++i) {
    const auto s = docs.sample(i);
    switch (document_of(s)) {
      case 0:  // 3 tokens, then padding
        EXPECT_EQ(s, (std::vector<std::int32_t>{100, 101, 102, 7, 7}));
        EXPECT_EQ(docs.length(i), 3);
        break;
      case 1:  // exactly 5
        EXPECT_EQ(s, (std::vector<std::int32_t>{200, 201, 202, 203, 204}));
        EXPECT_EQ(docs.length(i), 5);
        break;
      default:  // 8 tokens cut to 4 of the head and the last one (the closing [SEP] of an encoder)
        EXPECT_EQ(s, (std::vector<std::int32_t>{300, 301, 302, 303, 307}));
        EXPECT_EQ(docs.length(i), 5);
    }
  }
}

TEST(DocumentDataset, EachEpochIsItsOwnPermutationOfTheDocuments) {
  TempDir dir("trident-docs");
  auto ds = named_documents(dir / "d", std::vector<int>(12, 2));
  const DocumentDatasetConfig one{.sample_tokens = 4, .seed = 5, .documents = {2, 10}};
  const DocumentDatasetConfig many{.sample_tokens = 4, .num_samples = 20, .seed = 5, .documents = {2, 10}};
  DocumentDataset epoch(ds, one), tiled(ds, many);
  ASSERT_EQ(epoch.size(), 8);
  ASSERT_EQ(tiled.size(), 20);
  // The first epoch is the same whatever the size; each epoch holds every document of the range once.
  EXPECT_TRUE(std::equal(epoch.order().begin(), epoch.order().end(), tiled.order().begin()));
  for (int e = 0; e < 2; ++e) {
    std::vector<std::int32_t> sorted(tiled.order().begin() + 8 * e, tiled.order().begin() + 8 * (e + 1));
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<std::int32_t>{2, 3, 4, 5, 6, 7, 8, 9})) << "epoch " << e;
  }
  EXPECT_FALSE(std::equal(tiled.order().begin(), tiled.order().begin() + 8, tiled.order().begin() + 8));
  // A pure function of the seed.
  EXPECT_EQ(DocumentDataset(ds, many).order(), tiled.order());
  DocumentDatasetConfig other = many;
  other.seed = 6;
  EXPECT_NE(DocumentDataset(ds, other).order(), tiled.order());
}

TEST(DocumentDataset, BadConfigurationsNameTheDataset) {
  TempDir dir("trident-docs");
  auto ds = named_documents(dir / "d", {3, 5});
  EXPECT_THAT(error_of([&] { DocumentDataset(ds, {.sample_tokens = 4, .keep_last = 4}); }),
              HasSubstr("keep_last 4 must be in [0, the sample's 4 tokens)"));
  EXPECT_THAT(error_of([&] { DocumentDataset(ds, {.sample_tokens = 4, .documents = {1, 1}}); }),
              HasSubstr("document range [1, 1) holds no documents of the dataset's 2"));
  EXPECT_THAT(error_of([&] { DocumentDataset(ds, {.sample_tokens = 0}); }), HasSubstr("samples of 0 tokens"));
}

// A causal-LM batch: inputs [0, seq_len), the key mask over the real ones, labels ignored where the
// target is padding; the counts agree with the batches.
TEST(DocumentDataset, LoaderMasksPaddingAndCountsRealTokens) {
  TempDir dir("trident-docs");
  auto ds = named_documents(dir / "d", {2, 6, 4});
  auto docs = std::make_shared<DocumentDataset>(ds, DocumentDatasetConfig{.sample_tokens = 5, .pad_id = 9});
  DataLoader loader(docs, {.micro_batch_size = 3, .prefetch = 0});
  const Batch b = loader.next();
  ASSERT_TRUE(b.key_mask.defined());
  EXPECT_EQ(b.key_mask.shape(), (Shape{3, 4}));
  const auto tokens = b.tokens.to_vector<std::int64_t>(), labels = b.labels.to_vector<std::int64_t>();
  const auto mask = b.key_mask.to(DType::i64).to_vector<std::int64_t>();
  std::int64_t trained = 0, real = 0;
  for (std::int64_t r = 0; r < 3; ++r) {
    const std::int64_t doc = tokens[static_cast<std::size_t>(4 * r)] / 100 - 1;
    const std::int64_t n = std::min<std::int64_t>(std::vector<std::int64_t>{2, 6, 4}[static_cast<std::size_t>(doc)], 5);
    for (std::int64_t k = 0; k < 4; ++k) {
      const auto at = static_cast<std::size_t>(4 * r + k);
      EXPECT_EQ(mask[at], k < n ? 1 : 0) << "row " << r << " position " << k;
      EXPECT_EQ(tokens[at], k < n ? 100 * (doc + 1) + k : 9);
      EXPECT_EQ(labels[at], k + 1 < n ? 100 * (doc + 1) + k + 1 : kIgnoreLabel);
      trained += labels[at] != kIgnoreLabel;
      real += mask[at];
    }
  }
  EpochOrder order(docs->size(), 1234);
  EXPECT_EQ(trained, 1 + 4 + 3);
  EXPECT_EQ(trained_labels(*docs, order, 0, 3, LoaderOptions{}), trained);
  EXPECT_EQ(real, 2 + 4 + 4);
  EXPECT_EQ(real_tokens(*docs, order, 0, 3, LoaderOptions{}), real);
  // Under the end-of-document loss mask too: 201 is no end of document, so masking it drops one label.
  EXPECT_EQ(trained_labels(*docs, order, 0, 3, LoaderOptions{.masked_input_token = 201}), trained - 1);
  // A blend of padded sources is padded and passes the lengths on.
  BlendedDataset blend({docs, docs}, {1, 1}, 6);
  EXPECT_TRUE(blend.padded());
  for (std::int64_t i = 0; i < 6; ++i) EXPECT_EQ(blend.length(i), docs->length(blend.index().dataset_sample[i]));
}

// Masked LM over padded samples: padding is never selected, and the masks of the real tokens are those of
// the same sample without a length (the coordinates are unchanged).
TEST(DocumentDataset, MaskingNeverSelectsPadding) {
  MaskingOptions m;
  m.probability = 0.5;
  m.mask_token_id = 1;
  m.vocab_size = 50;
  m.special_ids = {0, 1, 2};
  std::vector<std::int32_t> tokens(32, 0);
  for (int t = 0; t < 20; ++t) tokens[static_cast<std::size_t>(t)] = 10 + t;  // 20 real tokens
  std::fill(tokens.begin() + 20, tokens.end(), 30);  // then padding with an id that is not special
  std::vector<std::int64_t> in(32), lab(32), in_all(32), lab_all(32);
  std::int64_t selected = 0;
  for (std::int64_t k = 0; k < 20; ++k) {
    const std::int64_t n = mask_sample(m, k, tokens, in, lab, 20);
    EXPECT_EQ(n, count_masked(m, k, tokens, 20));
    mask_sample(m, k, tokens, in_all, lab_all);
    for (std::size_t t = 20; t < 32; ++t) {
      EXPECT_EQ(lab[t], kIgnoreLabel);
      EXPECT_EQ(in[t], 30);
    }
    EXPECT_TRUE(std::equal(lab.begin(), lab.begin() + 20, lab_all.begin()));
    selected += n;
  }
  EXPECT_GT(selected, 0);
}

TEST(DocumentDataset, PaddingIdIsThePadTokenElseTheEndOfDocument) {
  const Tokenizer bert = Tokenizer::from_json(Tokenizer::wordpiece_json({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"}, true));
  EXPECT_EQ(padding_id(bert), 0);
  const Tokenizer gpt = testing::small_bpe("hello world");
  EXPECT_EQ(padding_id(gpt), gpt.eod_id());
  BpeTrainerOptions o;  // no special tokens at all
  o.vocab_size = 280;
  o.min_frequency = 1;
  BpeTrainer t(o);
  t.feed("hello world");
  EXPECT_EQ(padding_id(Tokenizer::from_json(tokenizer_json(t.train()))), std::nullopt);
}

}  // namespace
}  // namespace trident::data
