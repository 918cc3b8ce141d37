// GPT-2's byte-level alphabet: every byte maps to one printable Unicode
// character, so any byte string becomes a text string BPE can work on and
// back again, losslessly.
//
// Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves;
// the other 68 bytes map, in byte order, to U+0100, U+0101, ... (so ' ' is
// 'Ġ' U+0120 and '\n' is 'Ċ' U+010A). This is the table of GPT-2's encoder.py
// and of Hugging Face's ByteLevel pre-tokenizer and decoder.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace trident::data {

// The code point byte `b` maps to.
char32_t byte_to_char(std::uint8_t b) noexcept;
// The byte a code point stands for, or nothing when it is not in the alphabet.
std::optional<std::uint8_t> char_to_byte(char32_t c) noexcept;

// UTF-8 of byte_to_char(b) (one or two bytes), for building symbol strings.
std::string_view byte_to_utf8(std::uint8_t b) noexcept;

// Maps every byte of `bytes` through the alphabet (UTF-8 result).
std::string bytes_to_byte_level(std::string_view bytes);
// Inverse of bytes_to_byte_level. Returns nothing when `text` is not valid
// UTF-8 or holds a character outside the alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view text);

// Appends the UTF-8 encoding of `c` to `out`.
void append_utf8(std::string& out, char32_t c);
// Decodes the UTF-8 character at text[pos]; returns its length in bytes, or 0
// when the bytes there are not a valid, shortest-form, non-surrogate sequence.
std::size_t decode_utf8(std::string_view text, std::size_t pos, char32_t& c) noexcept;

}  // namespace trident::data
