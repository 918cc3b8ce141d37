#include "trident/data/tokenizer/decoder.h"

#include "trident/core/error.h"
#include "trident/data/tokenizer/byte_level.h"

namespace trident::data {
namespace {

// Rust's u8::from_str_radix(s, 16) on two bytes: an optional '+' and hex digits.
int parse_hex_byte(std::string_view s) {
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (s[0] == '+') return digit(s[1]);
  const int hi = digit(s[0]), lo = digit(s[1]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// The byte a "<0xNN>" token stands for, or -1 (Hugging Face's ByteFallback test).
int byte_token(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t.back() != '>') return -1;
  return parse_hex_byte(t.substr(3, 2));
}

bool valid_utf8(std::string_view s) {
  char32_t c = 0;
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t n = decode_utf8(s, pos, c);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

// The characters of `s` as byte ranges; a byte that starts no valid character counts as one.
std::vector<std::pair<std::size_t, char32_t>> chars_of(std::string_view s) {
  std::vector<std::pair<std::size_t, char32_t>> out;
  for (std::size_t pos = 0; pos < s.size();) {
    char32_t c = 0;
    std::size_t n = decode_utf8(s, pos, c);
    if (n == 0) {
      n = 1;
      c = 0xFFFFFFFF;
    }
    out.emplace_back(pos, c);
    pos += n;
  }
  return out;
}

void replace_all(std::string& s, std::string_view pattern, std::string_view content) {
  std::string out;
  std::size_t done = 0;
  for (std::size_t pos = s.find(pattern); pos != std::string::npos; pos = s.find(pattern, done)) {
    out.append(s, done, pos - done);
    out += content;
    done = pos + pattern.size();
  }
  if (done == 0) return;
  out.append(s, done);
  s.swap(out);
}

}  // namespace

void Decoder::add(Step step) {
  TRIDENT_CHECK(!byte_level(), "a ByteLevel decoder must be the only decoder step");
  steps_.push_back(std::move(step));
}

void Decoder::add_byte_level() {
  TRIDENT_CHECK(steps_.empty(), "a ByteLevel decoder must be the only decoder step");
  steps_.emplace_back(Kind::byte_level);
}

void Decoder::add_replace(std::string pattern, std::string content) {
  TRIDENT_CHECK(!pattern.empty(), "a Replace decoder needs a non-empty pattern");
  Step s(Kind::replace);
  s.pattern = std::move(pattern);
  s.content = std::move(content);
  add(std::move(s));
}

void Decoder::add_byte_fallback() {
  add(Step(Kind::byte_fallback));
}
void Decoder::add_fuse() {
  add(Step(Kind::fuse));
}

void Decoder::add_strip(char32_t content, std::size_t start, std::size_t stop) {
  Step s(Kind::strip);
  s.ch = content;
  s.start = start;
  s.stop = stop;
  add(std::move(s));
}

void Decoder::add_metaspace(char32_t replacement, bool drop_in_first_token) {
  Step s(Kind::metaspace);
  s.ch = replacement;
  s.drop_in_first = drop_in_first_token;
  add(std::move(s));
}

void Decoder::add_wordpiece(std::string prefix, bool cleanup) {
  Step s(Kind::wordpiece);
  s.pattern = std::move(prefix);
  s.cleanup = cleanup;
  add(std::move(s));
}

std::string Decoder::decode(const std::vector<std::string_view>& tokens) const {
  std::string out;
  if (steps_.empty()) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  if (byte_level()) {
    for (std::string_view t : tokens) {
      if (auto bytes = byte_level_to_bytes(t)) {
        out += *bytes;
      } else {
        out += t;
      }
    }
    return out;
  }
  std::vector<std::string> cur(tokens.begin(), tokens.end());
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::byte_level:
        break;  // only ever alone
      case Kind::replace:
        for (auto& t : cur) replace_all(t, step.pattern, step.content);
        break;
      case Kind::fuse: {
        std::string all;
        for (const auto& t : cur) all += t;
        cur.assign(1, std::move(all));
        break;
      }
      case Kind::byte_fallback: {
        next.clear();
        std::string bytes;
        auto flush = [&] {
          if (bytes.empty()) return;
          if (valid_utf8(bytes)) {
            next.push_back(bytes);
          } else {
            for (std::size_t i = 0; i < bytes.size(); ++i) next.emplace_back("\xEF\xBF\xBD");  // U+FFFD per byte
          }
          bytes.clear();
        };
        for (auto& t : cur) {
          if (const int b = byte_token(t); b >= 0) {
            bytes.push_back(static_cast<char>(b));
          } else {
            flush();
            next.push_back(std::move(t));
          }
        }
        flush();
        cur.swap(next);
        break;
      }
      case Kind::strip:
        for (auto& t : cur) {
          const auto chars = chars_of(t);
          std::size_t start_cut = 0, stop_cut = chars.size();
          for (std::size_t i = 0; i < chars.size() && i < step.start && chars[i].second == step.ch; ++i) {
            start_cut = i + 1;
          }
          // Hugging Face would panic where the cuts cross; they stop there.
          for (std::size_t i = 0; i < step.stop && stop_cut > start_cut && chars[stop_cut - 1].second == step.ch; ++i) {
            --stop_cut;
          }
          const std::size_t b = start_cut < chars.size() ? chars[start_cut].first : t.size();
          const std::size_t e = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
          t = t.substr(b, e - b);
        }
        break;
      case Kind::metaspace: {
        std::string rep;
        append_utf8(rep, step.ch);
        for (std::size_t i = 0; i < cur.size(); ++i) replace_all(cur[i], rep, i == 0 && step.drop_in_first ? "" : " ");
        break;
      }
      case Kind::wordpiece:
        for (std::size_t i = 0; i < cur.size(); ++i) {
          std::string& t = cur[i];
          if (i > 0) {
            if (!step.pattern.empty() && t.starts_with(step.pattern)) {
              t.erase(0, step.pattern.size());
            } else {
              std::string spaced;
              spaced.reserve(t.size() + 1);
              spaced.push_back(' ');
              spaced += t;
              t.swap(spaced);
            }
          }
          if (step.cleanup) {
            static constexpr std::pair<std::string_view, std::string_view> kCleanup[] = {
                {" .", "."},     {" ?", "?"},     {" !", "!"},   {" ,", ","},   {" ' ", "'"},   {" n't", "n't"},
                {" 'm", "'m"},   {" do not", " don't"},          {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
            for (const auto& [from, to] : kCleanup) replace_all(t, from, to);
          }
        }
        break;
    }
  }
  for (const auto& t : cur) out += t;
  return out;
}

}  // namespace trident::data
