// One document per sample, truncated or right-padded to a fixed length (Hugging Face's
// tokenizer(..., truncation=True, padding="max_length"); the trainer's data.packing = false), where
// GptDataset packs documents into windows that run across their boundaries.
//
// Sample i is document order[i] of the range: its first min(L, T) tokens (T = sample_tokens), then
// pad_id up to T. A document longer than T keeps its first T − keep_last tokens and its last
// keep_last ones, so the closing framing of `trident preprocess --encoder` ([SEP]) survives the cut as it
// does in Hugging Face's truncation, which shortens the text before the template adds [CLS] … [SEP].
// length(i) is min(L, T): the real tokens, from which the loader builds the attention mask and the
// ignored labels (loader.h).
//
// The order: with num_samples = 0 one epoch, every document of the range once; more samples tile the
// range over as many epochs as they need (the last one cut short). Each epoch is its own permutation of
// the documents, drawn by the counter-based RNG from (seed, epoch) (Megatron's per-epoch shuffle of the
// document index), so the order is a pure function of the seed. No index is cached on disk: the order
// is one permutation of the documents per epoch, cheaper to draw than to read back.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/sample_source.h"
#include "trident/data/dataset/split.h"
#include "trident/data/tokenizer/tokenizer.h"

namespace trident::data {

struct DocumentDatasetConfig {
  // Tokens per sample: seq_len + 1 for a causal LM (inputs [0, seq_len), labels [1, seq_len], as packed
  // windows), seq_len for a masked LM.
  std::int64_t sample_tokens = 1025;
  std::int32_t pad_id = 0;
  std::int64_t keep_last = 0;       // tokens a truncated document keeps from its end (its closing framing)
  std::int64_t num_samples = 0;     // 0: one epoch (each document once)
  std::uint64_t seed = 1234;
  DocumentRange documents{0, -1};   // end -1: all documents
};

class DocumentDataset final : public SampleSource {
 public:
  // Throws, naming the dataset, for an empty range, sample_tokens < 1, or keep_last outside [0, sample_tokens).
  DocumentDataset(std::shared_ptr<const IndexedDataset> dataset, DocumentDatasetConfig config);

  std::int64_t size() const override { return static_cast<std::int64_t>(order_.size()); }
  std::int64_t sample_tokens() const override { return config_.sample_tokens; }
  void sample(std::int64_t i, std::int32_t* out) const override;
  using SampleSource::sample;
  std::int64_t length(std::int64_t i) const override;
  bool padded() const override { return true; }

  // The document each sample holds, in sample order.
  const std::vector<std::int32_t>& order() const noexcept { return order_; }
  const DocumentDatasetConfig& config() const noexcept { return config_; }

 private:
  std::shared_ptr<const IndexedDataset> dataset_;
  DocumentDatasetConfig config_;
  std::vector<std::int32_t> order_;
};

// The id that pads a tokenizer's samples: its pad token (the first of padding_names() in its vocabulary),
// else its end-of-document token (what Hugging Face users of GPT-2 or Llama set as pad_token), else none.
// Which id it is changes no result: padding is hidden from attention and has no labels.
std::optional<std::int32_t> padding_id(const Tokenizer& tokenizer);
// "[PAD]", "<pad>", "<|pad|>", "<|padding|>": BERT's, T5's and RoBERTa's, and two of GPT-style files.
std::span<const std::string_view> padding_names() noexcept;

}  // namespace trident::data
