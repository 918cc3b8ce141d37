#include "trident/data/tokenizer/word_counts.h"

#include <algorithm>

#include "trident/core/error.h"

namespace trident::data {
namespace {

constexpr std::size_t kBlockBytes = std::size_t{1} << 20;

}  // namespace

void count_pieces(std::string_view text, const std::vector<Piece>& pieces, WordCounts& counts) {
  for (const Piece& p : pieces) {
    const std::string_view word = text.substr(p.begin, p.end - p.begin);
    if (auto it = counts.find(word); it != counts.end()) {
      ++it->second;
    } else {
      counts.emplace(std::string(word), 1);
    }
  }
}

std::vector<std::pair<std::string_view, std::int64_t>> sorted_word_counts(const WordCounts& counts) {
  std::vector<std::pair<std::string_view, std::int64_t>> sorted;
  sorted.reserve(counts.size());
  for (const auto& [w, c] : counts) sorted.emplace_back(w, c);
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

LineBlockReader::LineBlockReader(const std::filesystem::path& path) : path_(path), in_(path, std::ios::binary) {
  TRIDENT_CHECK(in_.good(), "cannot open training file '{}'", path_.string());
}

bool LineBlockReader::next(std::string& block) {
  if (eof_) return false;
  block = std::move(carry_);
  carry_.clear();
  const std::size_t have = block.size();
  block.resize(std::max(kBlockBytes, have + 1));
  in_.read(block.data() + have, static_cast<std::streamsize>(block.size() - have));
  block.resize(have + static_cast<std::size_t>(in_.gcount()));
  TRIDENT_CHECK(!in_.bad(), "error reading training file '{}'", path_.string());
  if (in_.eof()) {
    eof_ = true;
  } else if (auto nl = block.rfind('\n'); nl != std::string::npos) {
    carry_ = block.substr(nl + 1);
    block.resize(nl + 1);
  }
  return true;
}

}  // namespace trident::data
