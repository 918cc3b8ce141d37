#include "trident/data/tokenizer/unicode_compat.h"

#include <cctype>

#include "trident/core/error.h"

namespace trident::data {
namespace {

// Code points Hugging Face tokenizers 0.23 (Oniguruma, Unicode 16.0) puts in
// \p{L} / \p{N} but PCRE2 10.42 (Debian 12, Unicode 14.0) does not: the
// letters and digits assigned in Unicode 15 and 16 (CJK Extension H, Egyptian
// hieroglyphs extension A, Kawi, Garay, ...). Found by classifying every code
// point with both engines (tests/interop/tokenizer_interop.py checks it);
// adding them is harmless where PCRE2 already knows them.
constexpr const char* kExtraLetters =
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}\\x{10D4A}-\\x{10D65}"
    "\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}"
    "\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}"
    "\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}"
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}"
    "\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
constexpr const char* kExtraNumbers =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}\\x{16130}-\\x{16139}"
    "\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

// Unicode White_Space, which is what Oniguruma's \s matches. PCRE2's \s (with
// UCP) also matches U+180E MONGOLIAN VOWEL SEPARATOR, a space before Unicode 6.3.
constexpr const char* kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

}  // namespace

std::string align_unicode_classes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  std::size_t class_start = 0;  // index in `pattern` of the first char after '[' or '[^'
  std::size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 'Q') {  // \Q...\E: literal text
        const std::size_t end = pattern.find("\\E", i + 2);
        const std::size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
        out.append(pattern.substr(i, stop - i));
        i = stop;
        continue;
      }
      if (e == 'h' || e == 'H') {
        TRIDENT_FAIL("pattern '{}': \\{} is not supported (a hexadecimal digit in Hugging Face's Oniguruma, "
                     "horizontal white space in PCRE2)", pattern, e);
      }
      if (e == 's' || (e == 'S' && !in_class)) {
        if (in_class) {
          out += kWhiteSpace;
        } else {
          out += e == 's' ? "[" : "[^";
          out += kWhiteSpace;
          out += "]";
        }
        i += 2;
        continue;
      }
      if (e == 'p' || e == 'P') {
        std::string_view name;
        std::size_t len = 0;
        if (i + 2 < pattern.size() && pattern[i + 2] == '{') {
          const std::size_t close = pattern.find('}', i + 3);
          if (close != std::string_view::npos) {
            name = pattern.substr(i + 3, close - i - 3);
            len = close + 1 - i;
          }
        } else if (i + 2 < pattern.size()) {
          name = pattern.substr(i + 2, 1);
          len = 3;
        }
        const char* extra = name == "L" ? kExtraLetters : name == "N" ? kExtraNumbers : nullptr;
        if (extra != nullptr) {
          const std::string_view property = pattern.substr(i, len);
          if (in_class) {
            out.append(property);
            if (e == 'p') out += extra;  // a negated \P inside a class is left as PCRE2 has it
          } else {
            out += e == 'p' ? "[" : "[^";
            out += "\\p{";
            out.append(name);
            out += "}";
            out += extra;
            out += "]";
          }
          i += len;
          continue;
        }
      }
      out.append(pattern.substr(i, 2));
      i += 2;
      continue;
    }
    if (!in_class && (c == '^' || c == '$')) {
      TRIDENT_FAIL("pattern '{}': '{}' is not supported (Hugging Face's Oniguruma matches it at every line {}, "
                   "PCRE2 only at the {} of the text)", pattern, c, c == '^' ? "start" : "end",
                   c == '^' ? "start" : "end");
    }
    if (!in_class && c == '(' && i + 1 < pattern.size() && pattern[i + 1] == '?') {
      // Inline options "(?i)", "(?im-x:": Oniguruma's "m" is PCRE2's "s" (dot matches a newline).
      std::size_t k = i + 2;
      while (k < pattern.size() && (std::isalpha(static_cast<unsigned char>(pattern[k])) || pattern[k] == '-')) ++k;
      const std::string_view options = pattern.substr(i + 2, k - i - 2);
      if (k < pattern.size() && (pattern[k] == ':' || pattern[k] == ')') &&
          options.find_first_of("ms") != std::string_view::npos) {
        TRIDENT_FAIL("pattern '{}': the inline option '(?{}' is not supported (\"m\" lets '.' match a newline in "
                     "Hugging Face's Oniguruma but changes '^' and '$' in PCRE2; \"s\" is an error in Oniguruma)",
                     pattern, options);
      }
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      ++i;
      if (i < pattern.size() && pattern[i] == '^') out.push_back(pattern[i++]);
      class_start = i;
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {  // [:alpha:]
      const std::size_t close = pattern.find(":]", i + 2);
      const std::size_t stop = close == std::string_view::npos ? pattern.size() : close + 2;
      out.append(pattern.substr(i, stop - i));
      i = stop;
      continue;
    }
    if (in_class && c == ']' && i != class_start) in_class = false;
    out.push_back(c);
    ++i;
  }
  return out;
}

}  // namespace trident::data
