#include "trident/data/tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/uchar.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uniset.h>
#include <unicode/unistr.h>

#include <limits>
#include <memory>

#include "trident/core/error.h"
#include "trident/data/tokenizer/byte_level.h"

namespace trident::data {
namespace {

// ICU's NFC restricted to the characters of Unicode 9.0, Hugging Face's
// version (normalizer.h): a FilteredNormalizer2 normalizes the runs of
// characters in the set and copies every other character, which then acts as
// a starter that composes with nothing, as an unassigned character does.
// ICU's [:age=9.0:] holds the characters assigned in 9.0 or earlier.
class HfNfc {
 public:
  explicit HfNfc(bool compose = true) {
    UErrorCode ec = U_ZERO_ERROR;
    const icu::Normalizer2* nfc =
        compose ? icu::Normalizer2::getNFCInstance(ec) : icu::Normalizer2::getNFDInstance(ec);
    TRIDENT_CHECK(U_SUCCESS(ec), "ICU: cannot load the NFC/NFD data: {}", u_errorName(ec));
    set_ = std::make_unique<icu::UnicodeSet>(icu::UnicodeString::fromUTF8("[:age=9.0:]"), ec);
    TRIDENT_CHECK(U_SUCCESS(ec), "ICU: cannot build the set of Unicode 9.0 characters: {}", u_errorName(ec));
    set_->freeze();
    filtered_ = std::make_unique<icu::FilteredNormalizer2>(*nfc, *set_);
  }

  // Appends the NFC of `valid` (well-formed UTF-8) to `out`.
  void append(std::string_view valid, std::string& out) const {
    TRIDENT_CHECK(valid.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
                  "NFC normalizer: a text span of {} bytes is over ICU's 2 GiB limit", valid.size());
    icu::StringByteSink<std::string> sink(&out);
    UErrorCode ec = U_ZERO_ERROR;
    filtered_->normalizeUTF8(0, icu::StringPiece(valid.data(), static_cast<std::int32_t>(valid.size())), sink,
                             nullptr, ec);
    TRIDENT_CHECK(U_SUCCESS(ec), "NFC normalizer: ICU failed on a {}-byte span: {}", valid.size(), u_errorName(ec));
  }

 private:
  std::unique_ptr<icu::UnicodeSet> set_;
  std::unique_ptr<icu::FilteredNormalizer2> filtered_;
};

const HfNfc& hf_nfc() {
  static const HfNfc instance;
  return instance;
}

const HfNfc& hf_nfd() {
  static const HfNfc instance(false);
  return instance;
}

// Runs `n` on each maximal run of valid UTF-8 of `text`; other bytes are copied.
void normalize_runs(const HfNfc& n, std::string_view text, std::string& out) {
  out.clear();
  std::size_t pos = 0;
  while (pos < text.size()) {
    // A maximal run of valid UTF-8, then one of bytes that start no valid character.
    const std::size_t start = pos;
    char32_t c = 0;
    for (std::size_t len = 0; pos < text.size() && (len = decode_utf8(text, pos, c)) > 0;) pos += len;
    if (pos > start) n.append(text.substr(start, pos - start), out);
    const std::size_t bad = pos;
    while (pos < text.size() && decode_utf8(text, pos, c) == 0) ++pos;
    out.append(text.substr(bad, pos - bad));
  }
}

// Calls f(c) for each character of `text` and copy(bytes) for each run of
// bytes that starts no valid character.
template <class F, class Copy>
void for_each_char(std::string_view text, F&& f, Copy&& copy) {
  for (std::size_t pos = 0; pos < text.size();) {
    char32_t c = 0;
    const std::size_t len = decode_utf8(text, pos, c);
    if (len == 0) {
      copy(text.substr(pos, 1));
      ++pos;
    } else {
      f(c);
      pos += len;
    }
  }
}

// BERT's classes, as Hugging Face's BertNormalizer defines them.
bool bert_whitespace(char32_t c) { return c == '\t' || c == '\n' || c == '\r' || u_isUWhiteSpace(static_cast<UChar32>(c)); }
// Hugging Face's BertNormalizer takes its categories from tables of Unicode
// 8.0 (a character assigned later is no control character and no nonspacing
// mark there), and counts no unassigned character as a control character.
// A frozen ICU set, built once and kept for the process (function-local statics).
const icu::UnicodeSet& unicode8_set(const char* pattern) {
  UErrorCode ec = U_ZERO_ERROR;
  auto* set = new icu::UnicodeSet(icu::UnicodeString::fromUTF8(pattern), ec);  // never freed: used until exit
  TRIDENT_CHECK(U_SUCCESS(ec), "ICU: cannot build the set {}: {}", pattern, u_errorName(ec));
  set->freeze();
  return *set;
}

bool bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  static const icu::UnicodeSet& control = unicode8_set("[[:age=8.0:]&[[:Cc:][:Cf:][:Co:]]]");
  return control.contains(static_cast<UChar32>(c));
}

bool bert_nonspacing_mark(char32_t c) {
  // Corrected for the characters whose category changed after 8.0: U+1734 was
  // Mn then; U+1885, U+1886, U+A9BD and U+111C9 were not.
  static const icu::UnicodeSet& marks =
      unicode8_set("[[[[:age=8.0:]&[:Mn:]]-[\\u1885\\u1886\\uA9BD\\U000111C9]][\\u1734]]");
  return marks.contains(static_cast<UChar32>(c));
}

}  // namespace

bool is_bert_chinese_char(char32_t c) noexcept {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void bert_normalize(std::string_view text, const BertNormalizerOptions& o, std::string& out) {
  out.clear();
  out.reserve(text.size() + text.size() / 8);
  auto copy = [&](std::string_view bytes) { out.append(bytes); };
  for_each_char(
      text,
      [&](char32_t c) {
        if (o.clean_text) {
          if (c == 0 || c == 0xFFFD || bert_control(c)) return;
          if (bert_whitespace(c)) c = ' ';
        }
        if (o.handle_chinese_chars && is_bert_chinese_char(c)) {
          out.push_back(' ');
          append_utf8(out, c);
          out.push_back(' ');
          return;
        }
        append_utf8(out, c);
      },
      copy);
  std::string next;
  if (o.strip_accents) {
    normalize_runs(hf_nfd(), out, next);
    out.clear();
    for_each_char(
        next,
        [&](char32_t c) {
          if (!bert_nonspacing_mark(c)) append_utf8(out, c);
        },
        copy);
  }
  if (o.lowercase) {
    next.swap(out);
    out.clear();
    for_each_char(
        next,
        [&](char32_t c) {
          if (c < 0x80) {
            out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
          } else if (c == 0x130) {  // the one character whose lowercase is two: "i" + U+0307
            out += "i\xCC\x87";
          } else {
            append_utf8(out, static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))));
          }
        },
        copy);
  }
}

void nfc(std::string_view text, std::string& out) {
  out.clear();
  std::size_t pos = 0;
  while (pos < text.size() && static_cast<unsigned char>(text[pos]) < 0x80) ++pos;
  if (pos == text.size()) {  // ASCII is its own NFC
    out.assign(text);
    return;
  }
  normalize_runs(hf_nfc(), text, out);
}

void Normalizer::add_prepend(std::string prepend) {
  steps_.push_back({Kind::prepend, {}, std::move(prepend), {}});
}

void Normalizer::add_replace(std::string pattern, std::string content) {
  TRIDENT_CHECK(!pattern.empty(), "a Replace normalizer needs a non-empty pattern");
  steps_.push_back({Kind::replace, std::move(pattern), std::move(content), {}});
}

void Normalizer::add_nfc() { steps_.push_back({Kind::nfc, {}, {}, {}}); }

void Normalizer::add_bert(BertNormalizerOptions options) {
  Step s{Kind::bert, {}, {}, {}};
  s.bert = options;
  steps_.push_back(std::move(s));
}

void Normalizer::normalize(std::string_view text, std::string& out) const {
  out.assign(text);
  std::string next;
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Kind::prepend:
        if (!out.empty()) out.insert(0, s.content);
        continue;
      case Kind::nfc:
        nfc(out, next);
        out.swap(next);
        continue;
      case Kind::bert:
        bert_normalize(out, s.bert, next);
        out.swap(next);
        continue;
      case Kind::replace:
        break;
    }
    std::size_t pos = out.find(s.pattern);
    if (pos == std::string::npos) continue;
    next.clear();
    std::size_t done = 0;
    for (; pos != std::string::npos; pos = out.find(s.pattern, done)) {
      next.append(out, done, pos - done);
      next += s.content;
      done = pos + s.pattern.size();
    }
    next.append(out, done);
    out.swap(next);
  }
}

}  // namespace trident::data
