// Word counting shared by the vocabulary trainers (BpeTrainer,
// WordPieceTrainer): the count of each pre-tokenized word, training files
// read in blocks cut at line boundaries (so the counts, and the trained
// vocabulary, do not depend on how the blocks are shared among threads), and
// the counted words in a fixed order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trident/data/tokenizer/bpe_model.h"
#include "trident/data/tokenizer/pre_tokenizer.h"

namespace trident::data {

using WordCounts = std::unordered_map<std::string, std::int64_t, StringHash, std::equal_to<>>;

// Adds one to the count of each piece of `text` (pieces are offsets into `text`).
void count_pieces(std::string_view text, const std::vector<Piece>& pieces, WordCounts& counts);

// The counted words and their counts, sorted by word, so that what is built
// from them does not depend on the hash table's order. The views point into
// `counts`.
std::vector<std::pair<std::string_view, std::int64_t>> sorted_word_counts(const WordCounts& counts);

// Reads a training file in blocks of about 1 MiB, each cut after its last
// newline (the rest starts the next block), so that a line is split between
// two blocks only when a whole block holds no newline.
class LineBlockReader {
 public:
  explicit LineBlockReader(const std::filesystem::path& path);

  // Reads the next block into `block`; false (and `block` untouched) once the
  // block that reached the end of the file has been returned. That last block
  // may be empty.
  bool next(std::string& block);
  // Whether the block that reached the end of the file has been returned.
  bool done() const noexcept { return eof_; }

 private:
  std::filesystem::path path_;
  std::ifstream in_;
  std::string carry_;
  bool eof_ = false;
};

}  // namespace trident::data
