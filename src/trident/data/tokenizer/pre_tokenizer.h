// Pre-tokenization: cutting text into the pieces ("words") that BPE encodes
// one at a time, as Hugging Face's pre-tokenizers do.
//
// Supported steps (tokenizer.json `pre_tokenizer`, alone or in a `Sequence`):
//  - ByteLevel {add_prefix_space, use_regex}: with use_regex, splits by GPT-2's
//    pattern; in any case marks the pieces for byte-level mapping.
//  - Split {pattern: {Regex|String}, behavior: Isolated|Removed|Contiguous|
//    MergedWithPrevious|MergedWithNext, invert}.
//  - BertPreTokenizer: whitespace removed, punctuation isolated (add_bert).
//  - Metaspace {replacement, prepend_scheme: always|first|never, split}, as
//    the first step only: spaces become the replacement character, which is
//    also put in front of a span that does not start with it (always; first:
//    only the span at the start of the input), and with split the span is cut
//    in front of each replacement character (Split MergedWithNext).
// add_prefix_space is honoured only on a ByteLevel step that comes first (as in
// every published byte-level tokenizer); the Tokenizer applies it to the text.
// ByteLevel must be the last step: Hugging Face runs later steps on the
// byte-level characters, trident's steps all see the raw text.
//
// Input need not be valid UTF-8: each maximal run of invalid bytes becomes a
// piece of its own, untouched by the patterns, so valid text around it splits
// exactly as Hugging Face splits it and every byte survives byte-level mapping.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trident/data/tokenizer/regex.h"

namespace trident::data {

// GPT-2's pre-tokenizer pattern (Hugging Face ByteLevel's, verbatim).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class PrependScheme { always, first, never };

enum class SplitBehavior { isolated, removed, contiguous, merged_with_previous, merged_with_next };

struct Piece {
  std::size_t begin;
  std::size_t end;
};

class PreTokenizer {
 public:
  PreTokenizer() = default;  // no splitting, no byte-level mapping
  // GPT-2's: one ByteLevel step with the regex.
  static PreTokenizer gpt2(bool add_prefix_space = false);

  void add_byte_level(bool add_prefix_space, bool use_regex);
  void add_split(std::string_view regex_pattern, SplitBehavior behavior, bool invert);
  // BertPreTokenizer: two Split steps, White_Space removed, then each
  // punctuation character (Unicode P* and ASCII punctuation) isolated.
  void add_bert();
  // Only as the first step.
  void add_metaspace(char32_t replacement, PrependScheme scheme, bool split);

  bool empty() const noexcept { return steps_.empty() && !byte_level_ && !metaspace_; }
  bool byte_level() const noexcept { return byte_level_; }
  bool add_prefix_space() const noexcept { return add_prefix_space_; }
  bool metaspace() const noexcept { return metaspace_; }
  PrependScheme prepend_scheme() const noexcept { return prepend_scheme_; }

  // The text split() should cut for one span between added tokens: with
  // Metaspace, spaces replaced and the replacement prepended as its scheme
  // says (`at_start`: the span begins the input, for "first"); with ByteLevel's
  // add_prefix_space, a space prepended unless there is one. Returns `text`
  // itself or a view of `buf`.
  std::string_view prepare(std::string_view text, bool at_start, std::string& buf) const;

  class Scratch {
   public:
    Regex::Scratch regex;
    std::vector<Piece> a, b;
    std::vector<Regex::Match> matches;
  };
  // Replaces `out` with the pieces of `text` (byte ranges into `text`, in
  // order, non-empty). Thread-safe with one Scratch per thread.
  void split(std::string_view text, std::vector<Piece>& out, Scratch& scratch) const;

 private:
  struct Step {
    std::shared_ptr<const Regex> regex;  // null: the step does not split
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false;
  };
  std::vector<Step> steps_;
  bool byte_level_ = false;
  bool add_prefix_space_ = false;
  bool metaspace_ = false;
  PrependScheme prepend_scheme_ = PrependScheme::always;
  std::string replacement_;  // Metaspace's, UTF-8
};

}  // namespace trident::data
