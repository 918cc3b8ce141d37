#include "trident/data/tokenizer/byte_level.h"

namespace trident::data {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::int16_t, 512> from_char{};  // every mapped code point is < 0x200
  std::array<std::string, 256> utf8{};

  Tables() {
    from_char.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      from_char[to_char[b]] = static_cast<std::int16_t>(b);
      append_utf8(utf8[b], to_char[b]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(std::uint8_t b) noexcept { return tables().to_char[b]; }

std::optional<std::uint8_t> char_to_byte(char32_t c) noexcept {
  if (c >= 512) return std::nullopt;
  const std::int16_t b = tables().from_char[c];
  if (b < 0) return std::nullopt;
  return static_cast<std::uint8_t>(b);
}

std::string_view byte_to_utf8(std::uint8_t b) noexcept { return tables().utf8[b]; }

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += byte_to_utf8(b);
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    char32_t c = 0;
    const std::size_t n = decode_utf8(text, pos, c);
    if (n == 0) return std::nullopt;
    auto b = char_to_byte(c);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    pos += n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::size_t decode_utf8(std::string_view text, std::size_t pos, char32_t& c) noexcept {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  const std::size_t left = text.size() - pos;
  if (left == 0) return 0;
  const unsigned char b0 = s[0];
  if (b0 < 0x80) {
    c = b0;
    return 1;
  }
  std::size_t n = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (left < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    c = (c << 6) | (s[i] & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  return n;
}

}  // namespace trident::data
