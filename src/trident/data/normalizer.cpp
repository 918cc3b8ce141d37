#include "trident/data/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uniset.h>
#include <unicode/unistr.h>

#include <limits>
#include <memory>

#include "trident/core/error.h"
#include "trident/data/byte_level.h"

namespace trident::data {
namespace {

// ICU's NFC restricted to the characters of Unicode 9.0, Hugging Face's
// version (normalizer.h): a FilteredNormalizer2 normalizes the runs of
// characters in the set and copies every other character, which then acts as
// a starter that composes with nothing, as an unassigned character does.
// ICU's [:age=9.0:] holds the characters assigned in 9.0 or earlier.
class HfNfc {
 public:
  HfNfc() {
    UErrorCode ec = U_ZERO_ERROR;
    const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(ec);
    TRIDENT_CHECK(U_SUCCESS(ec), "ICU: cannot load the NFC data: {}", u_errorName(ec));
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

}  // namespace

void nfc(std::string_view text, std::string& out) {
  out.clear();
  std::size_t pos = 0;
  while (pos < text.size() && static_cast<unsigned char>(text[pos]) < 0x80) ++pos;
  if (pos == text.size()) {  // ASCII is its own NFC
    out.assign(text);
    return;
  }
  const HfNfc& n = hf_nfc();
  pos = 0;
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

void Normalizer::add_prepend(std::string prepend) {
  steps_.push_back({Kind::prepend, {}, std::move(prepend)});
}

void Normalizer::add_replace(std::string pattern, std::string content) {
  TRIDENT_CHECK(!pattern.empty(), "a Replace normalizer needs a non-empty pattern");
  steps_.push_back({Kind::replace, std::move(pattern), std::move(content)});
}

void Normalizer::add_nfc() { steps_.push_back({Kind::nfc, {}, {}}); }

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
