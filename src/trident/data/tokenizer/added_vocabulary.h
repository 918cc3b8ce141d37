// Added tokens (tokenizer.json `added_tokens`): strings such as
// "<|endoftext|>" that are cut out of the text before pre-tokenization and
// encoded as one id each, as Hugging Face's AddedVocabulary does.
//
// Matching is leftmost-longest. Tokens with normalized=false are extracted in
// a first pass over the raw text, tokens with normalized=true in a second pass
// over each remaining span after the normalizer ran on it (matching the
// normalized form of their content, as Hugging Face does). lstrip /
// rstrip absorb adjacent Unicode whitespace into the match; single_word
// rejects matches next to a word character (the search resumes after a
// rejected match, as Hugging Face's non-overlapping matcher does).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trident/data/tokenizer/normalizer.h"

namespace trident::data {

struct AddedToken {
  std::int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// A piece of the input: plain text [begin, end), or an added token (id >= 0)
// that covered [begin, end).
struct Segment {
  std::size_t begin;
  std::size_t end;
  std::int32_t token_id;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `normalizer` (may be null) gives the patterns of normalized tokens.
  explicit AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer = nullptr);

  const std::vector<AddedToken>& tokens() const noexcept { return tokens_; }
  // The text tokens()[i] stands for when decoded: its content, normalized when
  // the token is normalized=true (Hugging Face tokenizers 0.23 decodes such a
  // token to its normalized content: Qwen2-style NFC composes "e\u0301" to "é").
  const std::string& text(std::size_t i) const noexcept { return patterns_[i]; }
  bool empty() const noexcept { return tokens_.empty(); }
  bool has_normalized() const noexcept { return has_normalized_; }

  // Replaces `out` with the segments of `text`, in order, covering all of it
  // except whitespace absorbed by lstrip/rstrip. As in Hugging Face, a token
  // may start inside white space the previous token's rstrip absorbed; its
  // segment then overlaps the previous one.
  // Both passes with no normalizer in between.
  void split(std::string_view text, std::vector<Segment>& out) const;
  // The first pass alone (tokens with normalized=false) over the raw text.
  void split_raw(std::string_view text, std::vector<Segment>& out) const;
  // The second pass alone (normalized=true) over one normalized span.
  void split_normalized(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Pass {
    std::vector<std::vector<std::int32_t>> by_first_byte;  // token indices, longest first
    bool any[256] = {};
  };
  void build_pass(Pass& pass, bool normalized) const;
  void split_pass(const Pass& pass, std::string_view text, std::size_t begin, std::size_t end,
                  std::vector<Segment>& out) const;

  std::vector<AddedToken> tokens_;
  std::vector<std::string> patterns_;  // what each token matches
  bool has_normalized_ = false;
  Pass raw_;
  Pass normalized_;
};

// Unicode White_Space (Rust's char::is_whitespace).
bool is_unicode_whitespace(char32_t c) noexcept;

}  // namespace trident::data
