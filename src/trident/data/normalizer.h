// Normalization: the text edits Hugging Face's normalizers make before
// pre-tokenization. trident supports the two that SentencePiece-style BPE
// tokenizers (Llama 2, Mistral, TinyLlama, CodeLlama) use:
//  - Prepend {prepend}: puts `prepend` in front of non-empty text;
//  - Replace {pattern: {String}, content}: replaces every occurrence of the
//    string, left to right, non-overlapping;
// in any order (a Sequence). Llama 2's is Sequence[Prepend("▁"), Replace(" ", "▁")].
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

  bool empty() const noexcept { return steps_.empty(); }
  // Replaces `out` with the normalized `text`.
  void normalize(std::string_view text, std::string& out) const;

 private:
  struct Step {
    bool prepend;         // else replace
    std::string pattern;  // replace only
    std::string content;  // the prepended or the replacement text
  };
  std::vector<Step> steps_;
};

}  // namespace trident::data
