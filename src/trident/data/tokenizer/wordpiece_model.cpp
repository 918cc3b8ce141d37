#include "trident/data/tokenizer/wordpiece_model.h"

#include <algorithm>

#include "trident/core/error.h"
#include "trident/data/tokenizer/byte_level.h"

namespace trident::data {

WordPieceModel::WordPieceModel(Vocab vocab, WordPieceOptions options, std::string_view vocab_where)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  std::int32_t bound = 0;
  for (const auto& [token, id] : vocab_) {
    TRIDENT_CHECK(id >= 0 && id < kMaxTokenId, "{}: token '{}' has id {}; ids must be in [0, {})", vocab_where, token,
                  id, kMaxTokenId);
    bound = std::max(bound, id + 1);
    longest_ = std::max(longest_, token.size());
  }
  id_to_token_.assign(static_cast<std::size_t>(bound), std::string());
  has_id_.assign(static_cast<std::size_t>(bound), false);
  for (const auto& [token, id] : vocab_) {
    TRIDENT_CHECK(!has_id_[id], "{}: tokens '{}' and '{}' both have id {}", vocab_where,
                  std::min(token, id_to_token_[id]), std::max(token, id_to_token_[id]), id);
    has_id_[id] = true;
    id_to_token_[id] = token;
  }
  auto unk = vocab_.find(options_.unk_token);
  TRIDENT_CHECK(unk != vocab_.end(), "{}: the unknown token '{}' is not in the vocabulary", vocab_where,
                options_.unk_token);
  unk_id_ = unk->second;
}

std::optional<std::int32_t> WordPieceModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* WordPieceModel::id_to_token(std::int32_t id) const noexcept {
  if (id < 0 || id >= id_bound() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void WordPieceModel::tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
  // Character boundaries (a byte that starts no valid character counts as one character).
  std::vector<std::size_t> bounds;
  bounds.reserve(word.size() + 1);
  for (std::size_t pos = 0; pos < word.size();) {
    bounds.push_back(pos);
    char32_t c = 0;
    const std::size_t len = decode_utf8(word, pos, c);
    pos += len == 0 ? 1 : len;
  }
  bounds.push_back(word.size());
  const std::size_t chars = bounds.size() - 1;
  if (chars > options_.max_input_chars_per_word) {
    out.push_back(unk_id_);
    return;
  }
  const std::size_t start_size = out.size();
  std::string key;
  std::size_t start = 0;  // index into bounds
  while (start < chars) {
    key.clear();
    if (start > 0) key = options_.continuing_subword_prefix;
    const std::size_t key_base = key.size();
    std::int32_t found = -1;
    std::size_t end = chars;
    for (; end > start; --end) {
      const std::size_t bytes = bounds[end] - bounds[start];
      if (key_base + bytes > longest_) continue;
      key.resize(key_base);
      key.append(word.substr(bounds[start], bytes));
      if (auto it = vocab_.find(key); it != vocab_.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {
      out.resize(start_size);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

}  // namespace trident::data
