// Aligning PCRE2's Unicode tables with Hugging Face's.
//
// Hugging Face tokenizers matches its pre-tokenizer patterns with Oniguruma,
// whose Unicode tables are newer than those of the system PCRE2; a letter
// assigned in Unicode 15/16 is \p{L} there and not here, which would split
// text differently. align_unicode_classes rewrites a pattern so that \p{L},
// \p{N} (and \pL, \pN; \P{L}, \P{N} outside character classes) also cover those
// code points, inside and outside character classes; and \s (\S outside
// classes) becomes Unicode White_Space exactly, as in Oniguruma:
//   " ?\p{L}+"          ->  " ?[\p{L}\x{1C89}-\x{1C8A}...]+"
//   "[^\s\p{L}\p{N}]+"  ->  "[^\t\n...\x{3000}\p{L}\x{1C89}-...\p{N}\x{10D40}-...]+"
//
// It also refuses what both engines accept but read differently (a
// trident::Error quoting the pattern): '^' and '$' outside a class (line
// anchors in Oniguruma's Ruby syntax, text anchors in PCRE2), \h and \H
// (hexadecimal digit vs horizontal space) and the inline options m and s.
#pragma once

#include <string>
#include <string_view>

namespace trident::data {

std::string align_unicode_classes(std::string_view pattern);

}  // namespace trident::data
