// Normalization: the text edits Hugging Face's normalizers make before
// pre-tokenization. trident supports three, in any order (a Sequence):
//  - Prepend {prepend}: puts `prepend` in front of non-empty text;
//  - Replace {pattern: {String}, content}: replaces every occurrence of the
//    string, left to right, non-overlapping;
//  - NFC: Unicode canonical composition, as Hugging Face computes it (see
//    below).
// Llama 2's is Sequence[Prepend("▁"), Replace(" ", "▁")]; Qwen2's is NFC.
//
// NFC follows Hugging Face tokenizers, whose normalization tables are those of
// Unicode 9.0: a character assigned later (e.g. U+11938, Unicode 13, the
// composition of U+11935 U+11930) is left as it is and composes with nothing,
// exactly as an unassigned character. trident runs ICU's NFC on the text
// between such characters (docs/data.md, "Exactness"). Bytes that are not
// valid UTF-8 are kept as they are, and the valid text on each side of them is
// normalized on its own.
//
// Hugging Face normalizes each span between added tokens on its own, so the
// Tokenizer calls normalize() once per span (Prepend then applies to each).
// Immutable after construction; safe to share between threads.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trident::data {

class Normalizer {
 public:
  Normalizer() = default;  // the identity

  void add_prepend(std::string prepend);
  // `pattern` must not be empty.
  void add_replace(std::string pattern, std::string content);
  void add_nfc();

  bool empty() const noexcept { return steps_.empty(); }
  // Replaces `out` with the normalized `text`.
  void normalize(std::string_view text, std::string& out) const;

 private:
  enum class Kind { prepend, replace, nfc };
  struct Step {
    Kind kind;
    std::string pattern;  // replace only
    std::string content;  // the prepended or the replacement text
  };
  std::vector<Step> steps_;
};

// Hugging Face's NFC (Unicode 9.0 tables) of `text` into `out`; invalid UTF-8
// is copied unchanged.
void nfc(std::string_view text, std::string& out);

}  // namespace trident::data
