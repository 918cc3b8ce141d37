// GPT samples over an indexed dataset (Megatron's GPTDataset, oslo's
// DatasetForCausalLM): fixed windows of seq_len + 1 tokens that run across
// document boundaries, in a shuffled order.
//
// With add_extra_token = false (Megatron-core's add_extra_token_to_sequence,
// for masked LM), windows of exactly seq_len tokens that do not overlap: the
// shuffled document stream concatenated and cut into consecutive blocks, the
// remainder dropped (Hugging Face run_mlm's group_texts).
//
// Three indices, built as in Megatron (docs/data.md#datasets-and-loading-c), with trident's
// counter-based shuffles in place of numpy's (so an order is a pure function
// of the seed, not bit-identical to Megatron's):
//  - document index: the range's documents tiled over enough epochs for
//    num_samples, shuffled (the last epoch shuffled on its own when it would be
//    used for fewer than 80% of its samples, Megatron's separate_final_epoch);
//  - sample index: (position in the document index, token offset) where each
//    sample starts; a sample ends on the token where the next one starts;
//  - shuffle index: a permutation of the samples.
// "Documents" here are the .idx sequences (one per document as trident and
// Megatron's preprocess_data write them).
//
// Indices are cached on disk, keyed by everything that determines them (the
// .idx content hash, document range, seq_len, num_samples, seed,
// add_extra_token when false): the first
// process to take the cache lock builds and writes them (temp file + rename),
// every other process — other ranks starting at the same moment included —
// waits for the lock and then loads them. A loaded entry is checked once for
// what sample() relies on (every index in range, sample boundaries in order);
// a damaged one is a trident::Error naming the file (delete the entry to
// rebuild it), never a wild read later.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/sample_source.h"
#include "trident/data/dataset/split.h"

namespace trident::data {

struct GptIndices {
  std::vector<std::int32_t> document_index;  // sequence ids, over all epochs
  std::vector<std::int64_t> sample_index;    // 2 * (samples + 1): (doc position, offset) pairs
  std::vector<std::int64_t> shuffle_index;   // a permutation of [0, samples)
  std::int64_t samples() const noexcept { return static_cast<std::int64_t>(shuffle_index.size()); }
};

// Megatron's build_sample_idx: the start of each sample and the end of the
// last, for windows of seq_len + 1 tokens (consecutive windows share one
// token: a boundary is the last token of one sample and the first of the
// next). With add_extra_token = false, windows of seq_len tokens, and a
// boundary is where one sample ends (exclusive) and the next starts; a sample
// that ends with its document ends at (position, document length), as in
// Megatron-core. Returns 2 * (samples + 1) values.
std::vector<std::int64_t> build_sample_index(std::span<const std::int32_t> sizes,
                                             std::span<const std::int32_t> document_index, std::int64_t seq_len,
                                             std::int64_t samples, bool add_extra_token = true);

// All three indices. num_samples = 0: one epoch's worth.
GptIndices build_gpt_indices(std::span<const std::int32_t> sizes, DocumentRange documents, std::int64_t seq_len,
                             std::int64_t num_samples, std::uint64_t seed, bool add_extra_token = true);

struct GptDatasetConfig {
  std::int64_t seq_len = 1024;
  std::int64_t num_samples = 0;  // 0: one epoch
  std::uint64_t seed = 1234;
  DocumentRange documents{0, -1};  // end -1: all documents
  std::filesystem::path cache_dir = {};  // empty: build in memory, no cache
  // true: samples of seq_len + 1 tokens sharing one token (causal LM); false: non-overlapping samples of
  // exactly seq_len tokens (masked LM; Megatron-core's add_extra_token_to_sequence).
  bool add_extra_token = true;
};

class GptDataset final : public SampleSource {
 public:
  GptDataset(std::shared_ptr<const IndexedDataset> dataset, GptDatasetConfig config);

  std::int64_t size() const override { return indices_.samples(); }
  std::int64_t sample_tokens() const override { return config_.seq_len + (config_.add_extra_token ? 1 : 0); }
  void sample(std::int64_t i, std::int32_t* out) const override;
  using SampleSource::sample;

  const GptIndices& indices() const noexcept { return indices_; }
  const GptDatasetConfig& config() const noexcept { return config_; }
  // Whether this process built the cached indices (false: loaded, or no cache).
  bool built_cache() const noexcept { return built_cache_; }

 private:
  std::shared_ptr<const IndexedDataset> dataset_;
  GptDatasetConfig config_;
  GptIndices indices_;
  bool built_cache_ = false;
};

}  // namespace trident::data
