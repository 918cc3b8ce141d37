// The WordPiece model (BERT's): each pre-token is cut greedily from the left
// into the longest pieces of the vocabulary, every piece after the first
// spelled with the continuing-subword prefix ("##"), exactly as Hugging Face's
// `WordPiece` model does. A word with no such cutting, or with more than
// `max_input_chars_per_word` characters, becomes the one unknown token.
//
// Immutable after construction; safe to share between threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trident/data/tokenizer/bpe_model.h"

namespace trident::data {

struct WordPieceOptions {
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  std::size_t max_input_chars_per_word = 100;
};

class WordPieceModel {
 public:
  WordPieceModel() = default;
  // Throws trident::Error when the unknown token is not in the vocabulary or
  // two tokens share an id; `vocab_where` names the vocabulary in messages.
  WordPieceModel(Vocab vocab, WordPieceOptions options, std::string_view vocab_where = "vocabulary");

  // Encodes one pre-token (its UTF-8 bytes).
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;

  const Vocab& vocab() const noexcept { return vocab_; }
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  std::int32_t id_bound() const noexcept { return static_cast<std::int32_t>(id_to_token_.size()); }
  const std::string* id_to_token(std::int32_t id) const noexcept;
  const WordPieceOptions& options() const noexcept { return options_; }

 private:
  Vocab vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  WordPieceOptions options_;
  std::int32_t unk_id_ = -1;
  std::size_t longest_ = 0;  // bytes of the longest token (prefix included)
};

}  // namespace trident::data
