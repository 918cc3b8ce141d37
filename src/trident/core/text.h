// Small helpers on text shared by the modules that read user input.
#pragma once

#include <cstddef>
#include <string_view>

namespace trident {

// The Levenshtein distance between `a` and `b`: the fewest single-byte
// insertions, deletions and substitutions that turn one into the other. The
// config readers use it to suggest the key a typo was meant to be.
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace trident
