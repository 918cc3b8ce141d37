// Masked-LM data: masking statistics and the transformers collator's rules
// (80/10/10, specials never selected, whole words), counter-based determinism
// across data-parallel and micro-batch layouts, trained_labels, the
// non-overlapping GPT windows, and `preprocess` encoder mode (docs/data.md,
// "Masked-LM samples and masking").
#include "trident/data/dataset/masked_lm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <numeric>

#include "test_util.h"
#include "trident/data/dataset/gpt_dataset.h"
#include "trident/data/dataset/loader.h"
#include "trident/data/dataset/preprocess.h"

namespace trident::data {
namespace {

using testing::error_of;
using testing::TempDir;
using ::testing::HasSubstr;
using Ids = std::vector<std::int32_t>;

// Ids 0..4 are special (0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK]); ids >= 500 are continuations.
MaskingOptions toy_options(bool whole_word = false) {
  MaskingOptions o;
  o.mask_token_id = 4;
  o.vocab_size = 1000;
  o.special_ids = {0, 1, 2, 3, 4};
  o.seed = 99;
  o.whole_word = whole_word;
  if (whole_word) {
    o.continuation.assign(1000, 0);
    for (int id = 500; id < 1000; ++id) o.continuation[static_cast<std::size_t>(id)] = 1;
  }
  check_masking_options(o);
  return o;
}

// A sample of `n` tokens: [CLS] at 0, [SEP] and [UNK] sprinkled, other ids from a fixed pattern.
Ids toy_sample(std::int64_t k, std::size_t n) {
  Ids s(n);
  for (std::size_t t = 0; t < n; ++t) {
    const auto v = static_cast<std::int32_t>((k * 131 + static_cast<std::int64_t>(t) * 17) % 995 + 5);
    s[t] = t == 0 ? 2 : t % 37 == 0 ? 3 : t % 53 == 0 ? 1 : v;
  }
  return s;
}

bool special(std::int32_t id) { return id <= 4; }

TEST(MaskedLm, StatisticsFollowTheCollator) {
  const MaskingOptions o = toy_options();
  const std::size_t n = 128;
  std::int64_t candidates = 0, selected = 0, masked = 0, randomized = 0, kept = 0;
  std::vector<std::int64_t> random_buckets(10, 0);
  std::vector<std::int64_t> inputs(n), labels(n);
  for (std::int64_t k = 0; k < 4000; ++k) {
    const Ids s = toy_sample(k, n);
    const std::int64_t count = mask_sample(o, k, s, inputs, labels);
    ASSERT_EQ(count, count_masked(o, k, s));
    std::int64_t here = 0;
    for (std::size_t t = 0; t < n; ++t) {
      if (special(s[t])) {
        ASSERT_EQ(labels[t], kIgnoreLabel) << "a special token was selected";
        ASSERT_EQ(inputs[t], s[t]);
        continue;
      }
      ++candidates;
      if (labels[t] == kIgnoreLabel) {
        ASSERT_EQ(inputs[t], s[t]);
        continue;
      }
      ASSERT_EQ(labels[t], s[t]);
      ++selected;
      ++here;
      ASSERT_GE(inputs[t], 0);
      ASSERT_LT(inputs[t], o.vocab_size);
      if (inputs[t] == o.mask_token_id) {
        ++masked;
      } else if (inputs[t] == s[t]) {
        ++kept;
      } else {
        ++randomized;
        ++random_buckets[static_cast<std::size_t>(inputs[t] / 100)];
      }
    }
    ASSERT_EQ(count, here);
  }
  const double fraction = static_cast<double>(selected) / static_cast<double>(candidates);
  EXPECT_NEAR(fraction, 0.15, 0.003) << selected << " of " << candidates;  // ~75k selected: sd 0.0007
  const auto share = [&](std::int64_t c) { return static_cast<double>(c) / static_cast<double>(selected); };
  EXPECT_NEAR(share(masked), 0.8, 0.006);
  EXPECT_NEAR(share(randomized), 0.1, 0.005);  // a random id equal to the original counts as kept (1/1000)
  EXPECT_NEAR(share(kept), 0.1, 0.005);
  // Random ids are uniform over the whole vocabulary (special ids included, as in transformers).
  for (std::int64_t b : random_buckets) EXPECT_NEAR(static_cast<double>(b) / static_cast<double>(randomized), 0.1, 0.015);
}

TEST(MaskedLm, PureFunctionOfSeedSampleAndPosition) {
  MaskingOptions o = toy_options();
  const Ids s = toy_sample(5, 256);
  std::vector<std::int64_t> a(256), la(256), b(256), lb(256);
  mask_sample(o, 12345, s, a, la);
  mask_sample(o, 12345, s, b, lb);
  EXPECT_EQ(a, b);
  EXPECT_EQ(la, lb);
  mask_sample(o, 12346, s, b, lb);  // another global sample: other masks
  EXPECT_NE(la, lb);
  o.seed = 100;
  mask_sample(o, 12345, s, b, lb);
  EXPECT_NE(la, lb);
  // Probabilities 0 and 1.
  o.probability = 0;
  EXPECT_EQ(count_masked(o, 1, s), 0);
  o.probability = 1;
  EXPECT_EQ(count_masked(o, 1, s), std::count_if(s.begin(), s.end(), [](std::int32_t id) { return !special(id); }));
}

TEST(MaskedLm, WholeWordsAreSelectedWhole) {
  const MaskingOptions o = toy_options(true);
  const std::size_t n = 128;
  std::vector<std::int64_t> inputs(n), labels(n);
  std::int64_t words = 0, selected_words = 0, tokens = 0, selected_tokens = 0;
  for (std::int64_t k = 0; k < 3000; ++k) {
    Ids s = toy_sample(k, n);
    s[1] = 700;  // a continuation right after [CLS]: a word of its own
    mask_sample(o, k, s, inputs, labels);
    // Cut into words: a non-special token that is not a continuation, or follows a special token
    // (or starts the sample), starts a word; its continuations follow it.
    std::size_t t = 0;
    while (t < n) {
      if (special(s[t])) {
        ++t;
        continue;
      }
      std::size_t end = t + 1;
      while (end < n && !special(s[end]) && s[end] >= 500) ++end;
      const bool first = labels[t] != kIgnoreLabel;
      for (std::size_t u = t; u < end; ++u) {
        ASSERT_EQ(labels[u] != kIgnoreLabel, first) << "sample " << k << ": word [" << t << ", " << end << ")";
        if (first) {
          ASSERT_EQ(labels[u], s[u]);
        }
      }
      ++words;
      selected_words += first;
      tokens += static_cast<std::int64_t>(end - t);
      selected_tokens += first ? static_cast<std::int64_t>(end - t) : 0;
      t = end;
    }
  }
  EXPECT_NEAR(static_cast<double>(selected_words) / static_cast<double>(words), 0.15, 0.005);
  EXPECT_NEAR(static_cast<double>(selected_tokens) / static_cast<double>(tokens), 0.15, 0.006);
}

TEST(MaskedLm, BadOptionsAreNamed) {
  MaskingOptions o = toy_options();
  o.probability = 1.5;
  EXPECT_THAT(error_of([&] { check_masking_options(o); }), HasSubstr("probability 1.5 is not in [0, 1]"));
  o = toy_options();
  o.mask_token_id = -1;
  EXPECT_THAT(error_of([&] { check_masking_options(o); }), HasSubstr("mask_token_id -1"));
  o = toy_options();
  o.mask_ratio = 0.95;
  EXPECT_THAT(error_of([&] { check_masking_options(o); }), HasSubstr("sum of at most 1"));
  o = toy_options();
  o.whole_word = true;
  EXPECT_THAT(error_of([&] { check_masking_options(o); }), HasSubstr("continuation flag per id (1000), got 0"));
  o = toy_options();
  const Ids bad{2, 1000, 3};
  EXPECT_THAT(error_of([&] { count_masked(o, 7, bad); }),
              HasSubstr("global sample 7 holds token id 1000 at position 1, outside the vocabulary [0, 1000)"));
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

Tokenizer bpe_tokenizer() {
  return testing::small_bpe("In the beginning God created the heaven and the earth.\n");
}

TEST(MaskedLm, OptionsFromAWordPieceTokenizer) {
  TempDir dir("trident-mlm-vocab");
  write(dir / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n##s\nplay\n##ing\n");
  const Tokenizer tok = Tokenizer::load(dir.path() / "vocab.txt");
  const MaskingOptions o = masking_for_tokenizer(tok, 0.2, true, 5);
  EXPECT_EQ(o.mask_token_id, 4);
  EXPECT_EQ(o.vocab_size, 10);
  EXPECT_EQ(o.special_ids, (Ids{0, 1, 2, 3, 4}));
  EXPECT_EQ(o.continuation, (std::vector<std::uint8_t>{0, 0, 0, 0, 0, 0, 0, 1, 0, 1}));
  EXPECT_EQ(o.probability, 0.2);
  EXPECT_EQ(o.seed, 5u);
  EXPECT_TRUE(masking_for_tokenizer(tok).continuation.empty());
  // "playing worlds": [CLS] play ##ing world ##s [SEP]; with p = 1 every word is selected.
  MaskingOptions all = o;
  all.probability = 1;
  const Ids ids = tok.encode("playing worlds");
  ASSERT_EQ(ids, (Ids{2, 8, 9, 6, 7, 3}));
  EXPECT_EQ(count_masked(all, 0, ids), 4);
  const Tokenizer bpe = bpe_tokenizer();
  EXPECT_THAT(error_of([&] { masking_for_tokenizer(bpe); }),
              HasSubstr("the tokenizer has no mask token: expected [MASK]"));
}

// Sample i is [i*10, ..., i*10 + n - 1] with [CLS] (2) first: its content names it.
class MlmSource final : public SampleSource {
 public:
  MlmSource(std::int64_t size, std::int64_t n) : size_(size), n_(n) {}
  std::int64_t size() const override { return size_; }
  std::int64_t sample_tokens() const override { return n_; }
  void sample(std::int64_t i, std::int32_t* out) const override {
    for (std::int64_t k = 0; k < n_; ++k) out[k] = k == 0 ? 2 : static_cast<std::int32_t>(5 + (i * 10 + k) % 990);
  }
  using SampleSource::sample;

 private:
  std::int64_t size_, n_;
};

// Every global sample's (tokens, labels) rows, read through `steps` global micro-batches of a layout.
std::map<std::int64_t, std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> read_layout(
    const std::shared_ptr<const SampleSource>& src, const MaskingOptions& m, std::int64_t micro, int dp,
    std::int64_t global_samples, int prefetch) {
  std::map<std::int64_t, std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> rows;
  const std::int64_t t = src->sample_tokens();
  for (int rank = 0; rank < dp; ++rank) {
    DataLoader loader(src, {.micro_batch_size = micro, .dp_rank = rank, .dp_size = dp, .prefetch = prefetch,
                            .masking = m});
    for (std::int64_t step = 0; step < global_samples / (micro * dp); ++step) {
      const Batch b = loader.next();
      EXPECT_EQ(b.tokens.shape(), (Shape{micro, t}));
      EXPECT_EQ(b.labels.shape(), (Shape{micro, t}));
      const auto tok = b.tokens.to_vector<std::int64_t>();
      const auto lab = b.labels.to_vector<std::int64_t>();
      for (std::int64_t r = 0; r < micro; ++r) {
        rows[b.sample_ids[static_cast<std::size_t>(r)]] = {
            std::vector<std::int64_t>(tok.begin() + r * t, tok.begin() + (r + 1) * t),
            std::vector<std::int64_t>(lab.begin() + r * t, lab.begin() + (r + 1) * t)};
      }
    }
  }
  return rows;
}

TEST(MaskedLm, LoaderMasksTheSameTokensInEveryLayout) {
  auto src = std::make_shared<MlmSource>(13, 32);  // 48 global samples: epochs 0..3
  const MaskingOptions m = toy_options();
  const auto reference = read_layout(src, m, 1, 1, 48, 0);
  ASSERT_EQ(reference.size(), 48u);
  EXPECT_EQ(read_layout(src, m, 4, 1, 48, 2), reference);
  EXPECT_EQ(read_layout(src, m, 1, 2, 48, 0), reference);
  EXPECT_EQ(read_layout(src, m, 4, 2, 48, 3), reference);
  // Each row is mask_sample of the source sample at its global index; trained_labels counts them.
  EpochOrder order(src->size(), 1234);
  std::int64_t selected = 0;
  for (const auto& [k, row] : reference) {
    const auto sample = src->sample(order(k));
    std::vector<std::int64_t> in(32), lab(32);
    mask_sample(m, k, sample, in, lab);
    EXPECT_EQ(row.first, in);
    EXPECT_EQ(row.second, lab);
    selected += std::count_if(lab.begin(), lab.end(), [](std::int64_t l) { return l != kIgnoreLabel; });
  }
  EXPECT_GT(selected, 0);
  EXPECT_EQ(trained_labels(*src, order, 0, 48, m), selected);
  const LoaderOptions lo{.masking = m};
  EXPECT_EQ(trained_labels(*src, order, 0, 48, lo), selected);
  EXPECT_EQ(trained_labels(*src, order, 0, 48, LoaderOptions{}), 48 * 31);  // causal: seq_len labels each
  // The same source sample in another epoch is masked anew (dynamic masking).
  EXPECT_NE(reference.at(0).second, reference.at(13).second);
  EXPECT_THAT(error_of([&] { DataLoader(src, {.masked_input_token = 3, .masking = m}); }),
              HasSubstr("exclude each other"));
}

TEST(GptDataset, NonOverlappingToySampleIndex) {
  // Document lengths 5, 3, 7 and seq_len 4 without the extra token: blocks [0,4) of document 0, then
  // its last token with all of document 1 (ending at (1, 3), the end of document 1), then [0, 4) of
  // document 2; 15 / 4 = 3 samples.
  const std::vector<std::int32_t> sizes{5, 3, 7};
  const std::vector<std::int32_t> doc_index{0, 1, 2};
  EXPECT_EQ(build_sample_index(sizes, doc_index, 4, 3, false), (std::vector<std::int64_t>{0, 0, 0, 4, 1, 3, 2, 4}));
  EXPECT_EQ(build_gpt_indices(sizes, {0, 3}, 4, 0, 1, false).samples(), 3);
  EXPECT_EQ(build_gpt_indices(sizes, {0, 3}, 5, 0, 1, false).samples(), 3);  // exactly 15 tokens: 3 of 5
  EXPECT_THAT(error_of([&] { build_gpt_indices(sizes, {0, 3}, 16, 0, 1, false); }),
              HasSubstr("too few for one sample of 16"));
}

TEST(GptDataset, NonOverlappingWindowsAreConsecutiveBlocksOfTheDocumentStream) {
  TempDir dir("trident-gpt-blocks");
  const std::vector<int> lengths{5, 3, 7, 1, 9, 4, 6, 2, 8, 4};  // 49 tokens
  IndexedDatasetBuilder builder(dir / "c", TokenDType::u16);
  std::int32_t next = 0;
  for (int len : lengths) {
    Ids doc(static_cast<std::size_t>(len));
    std::iota(doc.begin(), doc.end(), next);
    next += len;
    builder.add_document(doc);
  }
  builder.finalize();
  auto ds = IndexedDataset::open(dir / "c");
  GptDatasetConfig cfg;
  cfg.seq_len = 4;
  cfg.num_samples = 30;  // 120 tokens: 3 epochs
  cfg.seed = 7;
  cfg.add_extra_token = false;
  cfg.cache_dir = dir.path() / "cache";
  for (int pass = 0; pass < 2; ++pass) {  // built, then loaded from the cache
    GptDataset gpt(ds, cfg);
    EXPECT_EQ(gpt.built_cache(), pass == 0);
    EXPECT_EQ(gpt.sample_tokens(), 4);
    const auto& ix = gpt.indices();
    // The document stream: the documents in document-index order, concatenated.
    Ids stream;
    for (std::int32_t d : ix.document_index) {
      const auto doc = ds->sequence(static_cast<std::size_t>(d));
      stream.insert(stream.end(), doc.begin(), doc.end());
    }
    EXPECT_EQ(gpt.size(), static_cast<std::int64_t>(stream.size()) / 4);
    EXPECT_GE(gpt.size(), 30);
    // Sample j of the (unshuffled) sample index is block j of the stream; the shuffle only reorders them.
    std::vector<Ids> by_block(static_cast<std::size_t>(gpt.size()));
    for (std::int64_t i = 0; i < gpt.size(); ++i) by_block[static_cast<std::size_t>(ix.shuffle_index[i])] = gpt.sample(i);
    for (std::size_t j = 0; j < by_block.size(); ++j) {
      ASSERT_EQ(by_block[j], Ids(stream.begin() + static_cast<std::ptrdiff_t>(4 * j),
                                 stream.begin() + static_cast<std::ptrdiff_t>(4 * j + 4)))
          << "block " << j;
    }
  }
  // The option is part of the cache key: the causal-LM indices get an entry of their own.
  cfg.add_extra_token = true;
  GptDataset causal(ds, cfg);
  EXPECT_TRUE(causal.built_cache());
  EXPECT_EQ(causal.sample_tokens(), 5);
}

TEST(Preprocess, EncoderModeFramesDocumentsWithTheTemplate) {
  TempDir dir("trident-pre-encoder");
  write(dir / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n##s\nplay\n##ing\n");
  const Tokenizer tok = Tokenizer::load(dir.path() / "vocab.txt");
  const std::vector<std::string> lines{"Hello worlds", "", "playing", "zzz hello", "  "};
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  write(dir / "in.txt", text);
  PreprocessOptions o;
  o.inputs = {dir / "in.txt"};
  o.output_prefix = dir / "out";
  o.encoder = true;
  const auto s = preprocess(tok, o);
  EXPECT_EQ(s.documents, 3u);
  EXPECT_EQ(s.empty_documents, 2u);  // not written as [CLS] [SEP]
  auto ds = IndexedDataset::open(dir / "out");
  ASSERT_EQ(ds->size(), 3u);
  EXPECT_EQ(ds->sequence(0), (Ids{2, 5, 6, 7, 3}));
  EXPECT_EQ(ds->sequence(1), (Ids{2, 8, 9, 3}));
  EXPECT_EQ(ds->sequence(2), (Ids{2, 1, 5, 3}));
  o.append_eod = true;
  EXPECT_THAT(error_of([&] { preprocess(tok, o); }), HasSubstr("drop --append-eod"));
  o.append_eod = false;
  o.add_special_tokens = false;
  EXPECT_THAT(error_of([&] { preprocess(tok, o); }), HasSubstr("drop --no-special-tokens"));
  o.add_special_tokens = true;
  EXPECT_THAT(error_of([&] { preprocess(bpe_tokenizer(), o); }),
              HasSubstr("the tokenizer's post-processor adds no tokens around a sequence"));
}

}  // namespace
}  // namespace trident::data
