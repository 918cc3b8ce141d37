// Normalization: the text edits Hugging Face's normalizers make before
// pre-tokenization. trident supports four, in any order (a Sequence):
//  - Prepend {prepend}: puts `prepend` in front of non-empty text;
//  - Replace {pattern: {String}, content}: replaces every occurrence of the
//    string, left to right, non-overlapping;
//  - NFC: Unicode canonical composition, as Hugging Face computes it (see
//    below);
//  - BertNormalizer (see BertNormalizerOptions).
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

// Hugging Face's BertNormalizer, in its order: clean_text drops NUL, U+FFFD
// and control characters (categories Cc, Cf, Cn, Co except \t \n \r) and
// turns every White_Space character (and \t \n \r) into a space;
// handle_chinese_chars puts a space on each side of a CJK ideograph (the
// blocks BERT lists); strip_accents decomposes (NFD, Unicode 9.0 as for NFC)
// and drops nonspacing marks (Mn); lowercase maps each character to its
// lowercase (U+0130 to "i" U+0307; no context-dependent final sigma).
struct BertNormalizerOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool strip_accents = true;  // the JSON's null means "as lowercase"; resolved by the loader
  bool lowercase = true;
};
// Replaces `out` with `text` normalized; invalid UTF-8 bytes are kept.
void bert_normalize(std::string_view text, const BertNormalizerOptions& options, std::string& out);
bool is_bert_chinese_char(char32_t c) noexcept;

class Normalizer {
 public:
  Normalizer() = default;  // the identity

  void add_prepend(std::string prepend);
  // `pattern` must not be empty.
  void add_replace(std::string pattern, std::string content);
  void add_nfc();
  void add_bert(BertNormalizerOptions options);

  bool empty() const noexcept { return steps_.empty(); }
  // Replaces `out` with the normalized `text`.
  void normalize(std::string_view text, std::string& out) const;

 private:
  enum class Kind { prepend, replace, nfc, bert };
  struct Step {
    Kind kind;
    std::string pattern;  // replace only
    std::string content;  // the prepended or the replacement text
    BertNormalizerOptions bert{};  // bert only
  };
  std::vector<Step> steps_;
};

// Hugging Face's NFC (Unicode 9.0 tables) of `text` into `out`; invalid UTF-8
// is copied unchanged.
void nfc(std::string_view text, std::string& out);

}  // namespace trident::data
