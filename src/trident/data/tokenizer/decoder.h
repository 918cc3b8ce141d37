// Decoding: turning tokens back into text as Hugging Face's decoders do.
//
// Supported (tokenizer.json `decoder`):
//  - ByteLevel, alone: each token made only of byte-level characters becomes
//    those bytes, any other stays as its text. The result is the raw bytes
//    (Hugging Face additionally replaces invalid UTF-8 with U+FFFD).
//  - A chain (Sequence) of Replace {pattern: {String}, content},
//    ByteFallback, Fuse, Strip {content, start, stop} and
//    Metaspace {replacement, prepend_scheme}, each with Hugging Face's
//    decode_chain semantics: ByteFallback turns runs of <0xNN> tokens into
//    their bytes when those are valid UTF-8, else into one U+FFFD per byte;
//    Strip removes up to `start` leading and `stop` trailing `content`
//    characters from each token; the Metaspace decoder turns the replacement
//    character into a space, except in the first token (where it is dropped)
//    unless prepend_scheme is "never". The chain's tokens are then joined.
//  - WordPiece {prefix, cleanup}: every token but the first loses a leading
//    `prefix`, or gets a space in front when it has none; with cleanup, each
//    token then has Hugging Face's English clean-up replacements applied
//    (" ." -> ".", " ?", " !", " ,", " ' " -> "'", " n't", " 'm", " 's",
//    " 've", " 're" lose their space, " do not" -> " don't").
//  - No decoder: the tokens joined by spaces.
// Immutable after construction; safe to share between threads.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace trident::data {

class Decoder {
 public:
  Decoder() = default;  // no decoder

  void add_byte_level();  // only as the one step
  void add_replace(std::string pattern, std::string content);
  void add_byte_fallback();
  void add_fuse();
  void add_strip(char32_t content, std::size_t start, std::size_t stop);
  void add_metaspace(char32_t replacement, bool drop_in_first_token);
  void add_wordpiece(std::string prefix, bool cleanup);

  bool empty() const noexcept { return steps_.empty(); }
  bool byte_level() const noexcept { return !steps_.empty() && steps_[0].kind == Kind::byte_level; }

  // The text of `tokens` (the tokens' strings, in order).
  std::string decode(const std::vector<std::string_view>& tokens) const;

 private:
  enum class Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace, wordpiece };
  struct Step {
    explicit Step(Kind k) : kind(k) {}
    Kind kind;
    std::string pattern;  // replace
    std::string content;  // replace
    char32_t ch = 0;      // strip: the character; metaspace: the replacement
    std::size_t start = 0, stop = 0;
    bool drop_in_first = false;  // metaspace
    bool cleanup = false;        // wordpiece
  };
  void add(Step step);
  std::vector<Step> steps_;
};

}  // namespace trident::data
