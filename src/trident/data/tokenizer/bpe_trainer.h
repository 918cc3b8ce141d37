// BpeTrainer: learns a byte-level BPE vocabulary from text, and writes it as a
// Hugging Face tokenizer.json (GPT-2's settings: ByteLevel pre-tokenizer with
// GPT-2's pattern and no prefix space, ByteLevel decoder and post-processor).
//
// Algorithm (Hugging Face's BpeTrainer): count the pre-tokenized words; start
// from the special tokens (ids 0..k-1) and the 256 byte-level characters in
// code-point order; then repeatedly merge the most frequent adjacent pair
// (ties: the pair of smallest ids), updating pair counts incrementally, until
// the vocabulary has `vocab_size` tokens or no pair is seen `min_frequency`
// times. Deterministic: the same input gives the same file, byte for byte,
// whatever the thread count.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trident/data/tokenizer/word_counts.h"

namespace trident::data {

struct BpeTrainerOptions {
  std::int32_t vocab_size = 4096;  // special tokens + 256 bytes + merges
  std::vector<std::string> special_tokens = {};
  std::int64_t min_frequency = 2;
  int threads = 0;  // word counting; 0: trident::num_threads()
  std::function<void(std::string_view)> log = {};  // progress lines, if set
};

struct TrainedBpe {
  std::vector<std::string> vocab;  // token (byte-level text) of each id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::vector<std::string> special_tokens;  // ids 0..k-1
};

class BpeTrainer {
 public:
  explicit BpeTrainer(BpeTrainerOptions options);

  // Counts the words of `text` (special tokens in it are cut out first).
  void feed(std::string_view text);
  // Counts the words of a file, read in chunks that end at line boundaries.
  void feed_file(const std::filesystem::path& path);

  TrainedBpe train() const;

  std::size_t distinct_words() const noexcept { return counts_.size(); }

 private:
  BpeTrainerOptions options_;
  WordCounts counts_;
};

// The tokenizer.json text for `bpe` (vocab in id order, merges as "a b").
std::string tokenizer_json(const TrainedBpe& bpe);
// Writes tokenizer_json(bpe) to `path` atomically (temporary file + rename).
void write_tokenizer_json(const TrainedBpe& bpe, const std::filesystem::path& path);

}  // namespace trident::data
