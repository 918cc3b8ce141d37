#include "trident/data/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "trident/data/tokenizer/byte_level.h"
#include "trident/data/tokenizer/regex.h"

namespace trident::data {
namespace {

// Rust's char::is_alphanumeric() || '_': Alphabetic or Numeric.
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  static const Regex word(R"(^[\p{Alphabetic}\p{N}])");
  thread_local Regex::Scratch scratch;
  thread_local std::vector<Regex::Match> m;
  std::string s;
  append_utf8(s, c);
  m.clear();
  word.find_all(s, m, scratch);
  return !m.empty();
}

// The last character of text[0, end), or 0 if none / not valid UTF-8.
char32_t char_before(std::string_view text, std::size_t end, std::size_t* start = nullptr) {
  if (end == 0) return 0;
  std::size_t b = end - 1;
  while (b > 0 && end - b < 4 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
  char32_t c = 0;
  if (decode_utf8(text, b, c) != end - b) return 0;
  if (start) *start = b;
  return c;
}

}  // namespace

bool is_unicode_whitespace(char32_t c) noexcept {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  patterns_.reserve(tokens_.size());
  for (const auto& t : tokens_) {
    patterns_.push_back(t.content);
    if (t.normalized && normalizer != nullptr) normalizer->normalize(t.content, patterns_.back());
    has_normalized_ = has_normalized_ || (t.normalized && !patterns_.back().empty());
  }
  build_pass(raw_, false);
  build_pass(normalized_, true);
}

void AddedVocabulary::build_pass(Pass& pass, bool normalized) const {
  pass.by_first_byte.assign(256, {});
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const auto& p = patterns_[i];
    if (p.empty() || tokens_[i].normalized != normalized) continue;
    const auto b = static_cast<unsigned char>(p[0]);
    pass.by_first_byte[b].push_back(static_cast<std::int32_t>(i));
    pass.any[b] = true;
  }
  for (auto& v : pass.by_first_byte) {
    // Longest first; equal lengths keep the declaration order.
    std::stable_sort(v.begin(), v.end(),
                     [&](std::int32_t a, std::int32_t b) { return patterns_[a].size() > patterns_[b].size(); });
  }
}

void AddedVocabulary::split_pass(const Pass& pass, std::string_view text, std::size_t begin, std::size_t end,
                                 std::vector<Segment>& out) const {
  std::size_t start_offset = begin;
  std::size_t pos = begin;
  while (pos < end) {
    const auto b = static_cast<unsigned char>(text[pos]);
    if (!pass.any[b]) {
      ++pos;
      continue;
    }
    const AddedToken* found = nullptr;
    std::size_t length = 0;
    for (std::int32_t i : pass.by_first_byte[b]) {
      const auto& c = patterns_[i];
      if (c.size() <= end - pos && std::memcmp(text.data() + pos, c.data(), c.size()) == 0) {
        found = &tokens_[i];
        length = c.size();
        break;
      }
    }
    if (!found) {
      ++pos;
      continue;
    }
    std::size_t m_begin = pos, m_end = pos + length;
    // Hugging Face's matcher resumes right after the match itself, even when
    // rstrip absorbs white space beyond it: a later match may start inside
    // that white space (overlapping the previous segment), as it does there.
    const std::size_t resume = m_end;
    if (found->single_word) {
      char32_t after = 0;
      const bool word_before = is_word_char(char_before(text, m_begin));
      const bool word_after = m_end < end && decode_utf8(text, m_end, after) > 0 && is_word_char(after);
      if ((m_begin > begin && word_before) || word_after) {
        // Hugging Face discards the match but its (non-overlapping) matcher
        // has consumed it: the search resumes after it, not inside it.
        pos = resume;
        continue;
      }
    }
    if (found->lstrip) {
      std::size_t s = m_begin, cb = 0;
      for (char32_t c; s > start_offset && (c = char_before(text, s, &cb)) != 0 && is_unicode_whitespace(c);) s = cb;
      m_begin = std::max(s, start_offset);
    }
    if (found->rstrip) {
      char32_t c = 0;
      std::size_t n = 0;
      while (m_end < end && (n = decode_utf8(text, m_end, c)) > 0 && is_unicode_whitespace(c)) m_end += n;
    }
    if (m_begin > start_offset) out.push_back({start_offset, m_begin, -1});
    // A match whose lstrip start lies at or past its (rstrip) end, in white
    // space the previous token absorbed, is empty; Hugging Face drops empty
    // splits, token and all.
    if (m_end > m_begin) out.push_back({m_begin, m_end, found->id});
    start_offset = m_end;
    pos = resume;
  }
  if (start_offset < end) out.push_back({start_offset, end, -1});
}

void AddedVocabulary::split_raw(std::string_view text, std::vector<Segment>& out) const {
  out.clear();
  if (!text.empty()) split_pass(raw_, text, 0, text.size(), out);
}

void AddedVocabulary::split_normalized(std::string_view text, std::vector<Segment>& out) const {
  out.clear();
  if (!text.empty()) split_pass(normalized_, text, 0, text.size(), out);
}

void AddedVocabulary::split(std::string_view text, std::vector<Segment>& out) const {
  out.clear();
  if (text.empty()) return;
  if (tokens_.empty()) {
    out.push_back({0, text.size(), -1});
    return;
  }
  thread_local std::vector<Segment> first;
  first.clear();
  split_pass(raw_, text, 0, text.size(), first);
  for (const Segment& s : first) {
    if (s.token_id >= 0) {
      out.push_back(s);
    } else {
      split_pass(normalized_, text, s.begin, s.end, out);
    }
  }
}

}  // namespace trident::data
