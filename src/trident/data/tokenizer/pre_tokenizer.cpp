#include "trident/data/tokenizer/pre_tokenizer.h"

#include <unicode/uniset.h>
#include <unicode/unistr.h>

#include "trident/core/error.h"
#include "trident/data/tokenizer/byte_level.h"
#include "trident/data/tokenizer/unicode_compat.h"

namespace trident::data {
namespace {

// A maximal run of valid UTF-8, or of bytes that start no valid character.
struct Run {
  std::size_t begin, end;
  bool valid;
};

// Cuts `text` into alternating valid and invalid runs.
void utf8_runs(std::string_view text, std::vector<Run>& runs) {
  runs.clear();
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t start = pos;
    char32_t c = 0;
    std::size_t n = 0;
    // Fast path for ASCII.
    while (pos < text.size() && (static_cast<unsigned char>(text[pos]) < 0x80 || (n = decode_utf8(text, pos, c)) > 0)) {
      pos += static_cast<unsigned char>(text[pos]) < 0x80 ? 1 : n;
    }
    if (pos > start) runs.push_back({start, pos, true});
    const std::size_t bad = pos;
    while (pos < text.size() && static_cast<unsigned char>(text[pos]) >= 0x80 && decode_utf8(text, pos, c) == 0) ++pos;
    if (pos > bad) runs.push_back({bad, pos, false});
  }
}

// Splits [begin, end) of `text` with `step`'s regex into `out`.
template <typename Step>
void apply_split(const Step& step, std::string_view text, Piece piece, std::vector<Piece>& out,
                 PreTokenizer::Scratch& scratch) {
  auto& m = scratch.matches;
  m.clear();
  step.regex->find_all(text.substr(piece.begin, piece.end - piece.begin), m, scratch.regex);
  // (range, is_match) covering the piece, as Hugging Face's Pattern::find_matches.
  struct Part {
    std::size_t begin, end;
    bool match;
  };
  thread_local std::vector<Part> parts;
  parts.clear();
  std::size_t prev = piece.begin;
  for (const auto& x : m) {
    const std::size_t b = piece.begin + x.begin, e = piece.begin + x.end;
    if (b > prev) parts.push_back({prev, b, false});
    parts.push_back({b, e, true});
    prev = e;
  }
  if (prev < piece.end) parts.push_back({prev, piece.end, false});
  if (step.invert) {
    for (auto& p : parts) p.match = !p.match;
  }
  // Puts each part in `out`, or, when joins(its match, the previous part's match), extends the last
  // piece this split put there with it.
  const auto join_parts = [&](auto joins) {
    bool prev_match = false;
    const std::size_t first = out.size();
    for (const auto& p : parts) {
      if (joins(p.match, prev_match) && out.size() > first) {
        out.back().end = p.end;
      } else {
        out.push_back({p.begin, p.end});
      }
      prev_match = p.match;
    }
  };
  switch (step.behavior) {
    case SplitBehavior::isolated:
      for (const auto& p : parts) out.push_back({p.begin, p.end});
      break;
    case SplitBehavior::removed:
      for (const auto& p : parts) {
        if (!p.match) out.push_back({p.begin, p.end});
      }
      break;
    case SplitBehavior::contiguous:
      // Neighbours that are both matches, or (after invert) both non-matches, join.
      join_parts([](bool match, bool prev_match) { return match == prev_match; });
      break;
    case SplitBehavior::merged_with_previous:
      // A match joins the part before it, unless that part is a match too.
      join_parts([](bool match, bool prev_match) { return match && !prev_match; });
      break;
    case SplitBehavior::merged_with_next: {
      // A match is glued to the front of the part that follows it.
      bool pending = false;
      std::size_t pending_begin = 0;
      for (const auto& p : parts) {
        if (p.match && !pending) {
          pending = true;
          pending_begin = p.begin;
          continue;
        }
        if (pending) {
          if (p.match) {
            out.push_back({pending_begin, p.begin});
            pending_begin = p.begin;
            continue;
          }
          out.push_back({pending_begin, p.end});
          pending = false;
        } else {
          out.push_back({p.begin, p.end});
        }
      }
      if (pending) out.push_back({pending_begin, piece.end});
      break;
    }
  }
}

// Compiles `pattern` with \p{L} / \p{N} widened to Hugging Face's Unicode
// version; errors quote the pattern as written.
std::shared_ptr<const Regex> compile(std::string_view pattern) {
  try {
    return std::make_shared<const Regex>(align_unicode_classes(pattern));
  } catch (const Error&) {
    Regex as_written(pattern);  // throws with the user's pattern in the message
    throw;
  }
}

}  // namespace

PreTokenizer PreTokenizer::gpt2(bool add_prefix_space) {
  PreTokenizer p;
  p.add_byte_level(add_prefix_space, true);
  return p;
}

void PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  TRIDENT_CHECK(!add_prefix_space || empty(),
                "ByteLevel pre-tokenizer with add_prefix_space=true is supported only as the first step");
  if (empty()) add_prefix_space_ = add_prefix_space;
  byte_level_ = true;
  if (use_regex) {
    static const auto gpt2 = compile(kGpt2Pattern);
    steps_.push_back({gpt2, SplitBehavior::isolated, false});
  } else {
    steps_.push_back({nullptr, SplitBehavior::isolated, false});
  }
}

void PreTokenizer::add_split(std::string_view regex_pattern, SplitBehavior behavior, bool invert) {
  TRIDENT_CHECK(!byte_level_,
                "a Split pre-tokenizer after ByteLevel is not supported (it would see byte-level characters)");
  steps_.push_back({compile(regex_pattern), behavior, invert});
}

void PreTokenizer::add_bert() {
  // Hugging Face's BertPreTokenizer: split on White_Space (removed), then
  // each punctuation character on its own: ASCII punctuation, or category P*
  // in its tables, which are Unicode 8.0's (a later one is no punctuation;
  // U+111C9, a mark since Unicode 11, and U+166D, a symbol since Unicode 12,
  // were punctuation then).
  static const std::string punctuation = [] {
    UErrorCode ec = U_ZERO_ERROR;
    icu::UnicodeSet set(icu::UnicodeString::fromUTF8("[[[:age=8.0:]&[:P:]][\\u0021-\\u002F\\u003A-\\u0040\\u005B-\\u0060\\u007B-\\u007E\\u166D\\U000111C9]]"), ec);
    TRIDENT_CHECK(U_SUCCESS(ec), "ICU: cannot build the set of BERT punctuation: {}", u_errorName(ec));
    std::string cls = "[";
    for (std::int32_t i = 0; i < set.getRangeCount(); ++i) {
      cls += fmt::format("\\x{{{:x}}}-\\x{{{:x}}}", set.getRangeStart(i), set.getRangeEnd(i));
    }
    return cls + "]";
  }();
  add_split(R"(\s+)", SplitBehavior::removed, false);
  add_split(punctuation, SplitBehavior::isolated, false);
}

void PreTokenizer::add_metaspace(char32_t replacement, PrependScheme scheme, bool split) {
  TRIDENT_CHECK(empty(), "a Metaspace pre-tokenizer is supported only as the first step");
  metaspace_ = true;
  prepend_scheme_ = scheme;
  replacement_.clear();
  append_utf8(replacement_, replacement);
  if (split) {
    steps_.push_back({compile(fmt::format("\\x{{{:x}}}", static_cast<std::uint32_t>(replacement))),
                      SplitBehavior::merged_with_next, false});
  }
}

std::string_view PreTokenizer::prepare(std::string_view text, bool at_start, std::string& buf) const {
  if (metaspace_) {
    buf.clear();
    const bool prepend =
        (prepend_scheme_ == PrependScheme::always || (prepend_scheme_ == PrependScheme::first && at_start)) &&
        !text.starts_with(replacement_) && !text.starts_with(' ');
    if (prepend) buf = replacement_;
    for (char c : text) {
      if (c == ' ') {
        buf += replacement_;
      } else {
        buf.push_back(c);
      }
    }
    return buf;
  }
  if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
    buf.assign(1, ' ');
    buf.append(text);
    return buf;
  }
  return text;
}

void PreTokenizer::split(std::string_view text, std::vector<Piece>& out, Scratch& scratch) const {
  out.clear();
  if (text.empty()) return;
  thread_local std::vector<Run> runs;
  utf8_runs(text, runs);
  // Invalid runs never reach a pattern; they are kept as pieces in place.
  for (const Run& run : runs) {
    if (!run.valid) {
      out.push_back({run.begin, run.end});
      continue;
    }
    auto& cur = scratch.a;
    cur.assign(1, Piece{run.begin, run.end});
    for (const Step& step : steps_) {
      if (!step.regex) continue;
      auto& next = scratch.b;
      next.clear();
      for (const Piece& p : cur) apply_split(step, text, p, next, scratch);
      std::swap(cur, next);
    }
    for (const Piece& p : cur) {
      if (p.end > p.begin) out.push_back(p);
    }
  }
}

}  // namespace trident::data
