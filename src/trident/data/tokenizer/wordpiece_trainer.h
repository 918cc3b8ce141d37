// WordPieceTrainer: learns a BERT-style WordPiece vocabulary from text and
// writes it as a Hugging Face tokenizer.json (BertNormalizer with lowercase,
// BertPreTokenizer, WordPiece with "##" and [UNK], the template
// [CLS] $A [SEP] / [CLS] $A [SEP] $B:1 [SEP]:1, the WordPiece decoder; the
// special tokens [PAD] [UNK] [CLS] [SEP] [MASK] are ids 0..4).
//
// Algorithm: the words of the normalized, pre-tokenized text are counted;
// each word starts as its characters, every one after the first spelled with
// "##"; the vocabulary starts with the special tokens and, in code-point
// order, every character seen and its "##" form; then the most frequent
// adjacent pair of symbols (ties: the pair of smallest ids) is merged into one
// token ("ab" + "##c" -> "abc") until the vocabulary has `vocab_size` tokens or
// no pair is seen `min_frequency` times. The vocabulary differs from Hugging
// Face's WordPieceTrainer's; the file encodes identically in both libraries
// because encoding is the WordPiece model's greedy longest match, not the
// merges. Deterministic: the same input gives the same file, byte for byte.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trident/data/tokenizer/word_counts.h"

namespace trident::data {

struct WordPieceTrainerOptions {
  std::int32_t vocab_size = 30522;
  std::int64_t min_frequency = 2;
  std::function<void(std::string_view)> log;  // progress lines, if set
};

class WordPieceTrainer {
 public:
  explicit WordPieceTrainer(WordPieceTrainerOptions options);

  // Counts the words of `text`.
  void feed(std::string_view text);
  // Counts the words of a file, read in blocks that end at line boundaries.
  void feed_file(const std::filesystem::path& path);

  // The tokens in id order (the special tokens first).
  std::vector<std::string> train() const;

  std::size_t distinct_words() const noexcept { return counts_.size(); }

 private:
  WordPieceTrainerOptions options_;
  WordCounts counts_;
};

// The special tokens of a trained WordPiece vocabulary, ids 0..4.
inline constexpr const char* kWordPieceSpecialTokens[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

// Writes the tokenizer.json of `tokens` (Tokenizer::wordpiece_json, lowercase) atomically.
void write_wordpiece_tokenizer_json(const std::vector<std::string>& tokens, const std::filesystem::path& path);

}  // namespace trident::data
