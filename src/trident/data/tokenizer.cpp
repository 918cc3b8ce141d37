#include "trident/data/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>

#include "trident/core/atomic_file.h"
#include "trident/core/error.h"
#include "trident/data/byte_level.h"

namespace trident::data {

Tokenizer::Tokenizer(TokenizerParts parts) {
  std::int32_t bound = parts.model.id_bound();
  for (const auto& t : parts.added.tokens()) {
    TRIDENT_CHECK(t.id >= 0 && t.id < kMaxTokenId, "added token '{}' has id {}; ids must be in [0, {})", t.content,
                  t.id, kMaxTokenId);
    bound = std::max(bound, t.id + 1);
  }
  auto added_by_id = std::make_shared<std::vector<std::int32_t>>(static_cast<std::size_t>(bound), -1);
  for (std::size_t i = 0; i < parts.added.tokens().size(); ++i) {
    (*added_by_id)[parts.added.tokens()[i].id] = static_cast<std::int32_t>(i);
  }
  vocab_size_ = bound;
  added_by_id_ = std::move(added_by_id);
  parts_ = std::make_shared<const TokenizerParts>(std::move(parts));
}

const TokenizerParts& Tokenizer::parts() const {
  TRIDENT_CHECK(parts_ != nullptr, "use of an empty Tokenizer (load one with Tokenizer::load)");
  return *parts_;
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  return from_json(read_whole_file(tokenizer_json, "tokenizer file"), tokenizer_json.string());
}

Tokenizer Tokenizer::from_gpt2_files(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt) {
  const std::string vocab_text = read_whole_file(vocab_json, "vocabulary file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(vocab_text);
  } catch (const nlohmann::json::parse_error& e) {
    TRIDENT_FAIL("{}: invalid JSON at byte {}: {}", vocab_json.string(), e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {
    TRIDENT_FAIL("{}: invalid JSON: {}", vocab_json.string(), e.what());
  }
  TRIDENT_CHECK(j.is_object(), "{}: $: expected an object of token -> id, got {}", vocab_json.string(), j.type_name());
  Vocab vocab;
  for (const auto& [token, id] : j.items()) {
    TRIDENT_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < (1LL << 31),
                  "{}: $[\"{}\"]: expected a non-negative integer id, got {}", vocab_json.string(), token, id.dump());
    vocab.emplace(token, id.get<std::int32_t>());
  }
  const std::string merges_text = read_whole_file(merges_txt, "merges file");
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::size_t> lines;
  std::size_t line_no = 0, pos = 0;
  while (pos < merges_text.size()) {
    std::size_t eol = merges_text.find('\n', pos);
    if (eol == std::string::npos) eol = merges_text.size();
    std::string_view line(merges_text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const std::size_t sp = line.find(' ');
    TRIDENT_CHECK(sp != std::string_view::npos && line.find(' ', sp + 1) == std::string_view::npos && sp > 0 &&
                      sp + 1 < line.size(),
                  "{}:{}: expected a merge 'LEFT RIGHT', got '{}'", merges_txt.string(), line_no, line);
    merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
    lines.push_back(line_no);
  }
  TokenizerParts parts;
  parts.model = BpeModel(std::move(vocab), merges, {}, [&](std::size_t i) {
    return fmt::format("{}:{}", merges_txt.string(), lines[i]);
  }, vocab_json.string());
  if (auto eot = parts.model.token_to_id("<|endoftext|>")) {
    AddedToken t;
    t.id = *eot;
    t.content = "<|endoftext|>";
    t.special = true;
    parts.added = AddedVocabulary({t});
  }
  parts.pre_tokenizer = PreTokenizer::gpt2(false);
  parts.decoder.add_byte_level();
  return Tokenizer(std::move(parts));
}

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  TRIDENT_CHECK(fs::exists(path), "tokenizer '{}' does not exist (expected a tokenizer.json, a vocab.json with "
                "merges.txt beside it, or a directory holding either)", path.string());
  if (fs::is_directory(path)) {
    if (fs::exists(path / "tokenizer.json")) return from_file(path / "tokenizer.json");
    TRIDENT_CHECK(fs::exists(path / "vocab.json") && fs::exists(path / "merges.txt"),
                  "directory '{}' holds neither tokenizer.json nor vocab.json + merges.txt", path.string());
    return from_gpt2_files(path / "vocab.json", path / "merges.txt");
  }
  if (path.filename() == "vocab.json") {
    const fs::path merges = path.parent_path() / "merges.txt";
    TRIDENT_CHECK(fs::exists(merges), "'{}' is a GPT-2 vocabulary but '{}' is missing", path.string(), merges.string());
    return from_gpt2_files(path, merges);
  }
  return from_file(path);
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  Encoder enc(*this, 1 << 14);
  return enc.encode(text, add_special_tokens);
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  const TokenizerParts& p = parts();
  std::vector<std::string_view> tokens;
  tokens.reserve(ids.size());
  for (std::int32_t id : ids) {
    TRIDENT_CHECK(id >= 0 && id < vocab_size_, "cannot decode id {}: the vocabulary has ids 0..{}", id,
                  vocab_size_ - 1);
    const std::int32_t added = (*added_by_id_)[id];
    if (added >= 0) {
      const AddedToken& t = p.added.tokens()[added];
      if (skip_special_tokens && t.special) continue;
      tokens.push_back(p.added.text(static_cast<std::size_t>(added)));
    } else {
      const std::string* token = p.model.id_to_token(id);
      TRIDENT_CHECK(token != nullptr, "cannot decode id {}: no token has this id", id);
      tokens.push_back(*token);
    }
  }
  return p.decoder.decode(tokens);
}

std::int32_t Tokenizer::vocab_size() const {
  parts();
  return vocab_size_;
}

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const auto& t : parts().added.tokens()) {
    if (t.content == token) return t.id;
  }
  return parts().model.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(std::int32_t id) const {
  if (id < 0 || id >= vocab_size()) return std::nullopt;
  const std::int32_t added = (*added_by_id_)[id];
  if (added >= 0) return parts().added.text(static_cast<std::size_t>(added));
  if (const std::string* t = parts().model.id_to_token(id)) return *t;
  return std::nullopt;
}

bool Tokenizer::is_special(std::int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  const std::int32_t added = (*added_by_id_)[id];
  return added >= 0 && parts().added.tokens()[added].special;
}

std::span<const std::string_view> end_of_document_names() noexcept {
  static constexpr std::array<std::string_view, 4> kNames = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
  return kNames;
}

std::string end_of_document_names_text() {
  const auto names = end_of_document_names();
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

std::optional<std::int32_t> Tokenizer::eod_id() const {
  for (std::string_view name : end_of_document_names()) {
    if (auto id = token_to_id(name)) return id;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------- DecodeStream

namespace {

// Whether `text` ends in the middle of a UTF-8 sequence, or in U+FFFD (which a
// ByteFallback decoder gives for the bytes of a character not yet complete).
bool ends_unfinished(std::string_view text) {
  if (text.ends_with("\xEF\xBF\xBD")) return true;
  for (std::size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) != 0x80) {  // the last lead byte: does its sequence reach the end?
      const std::size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      return length > back;
    }
  }
  return false;
}

}  // namespace

DecodeStream::DecodeStream(Tokenizer tokenizer, std::vector<std::int32_t> context)
    : tokenizer_(std::move(tokenizer)), ids_(std::move(context)), shown_(tokenizer_.decode(ids_)) {}

std::string DecodeStream::step(std::int32_t id) {
  ids_.push_back(id);
  return advance(false);
}

std::string DecodeStream::finish() { return advance(true); }

std::string DecodeStream::advance(bool final) {
  std::string text = tokenizer_.decode(ids_);
  if (!final && ends_unfinished(text)) return {};
  // Normally the new text extends what was shown; where a decoder rewrote earlier text, only the part
  // after the common prefix can still be shown.
  const auto diverge = std::mismatch(shown_.begin(), shown_.end(), text.begin(), text.end());
  std::string added(diverge.second, text.end());
  shown_ = std::move(text);
  return added;
}

// ---------------------------------------------------------------- Encoder

// Long pieces (runs of digits, base64 blobs) rarely repeat; caching them
// would only grow the arena.
constexpr std::size_t kMaxCachedPiece = 256;

Encoder::Encoder(Tokenizer tokenizer, std::size_t cache_entries)
    : tokenizer_(std::move(tokenizer)), parts_(&tokenizer_.parts()), cache_entries_(cache_entries) {}

std::vector<std::int32_t> Encoder::encode(std::string_view text, bool add_special_tokens) {
  std::vector<std::int32_t> out;
  encode(text, out, add_special_tokens);
  return out;
}

void Encoder::encode(std::string_view text, std::vector<std::int32_t>& out, bool add_special_tokens) {
  if (add_special_tokens) out.insert(out.end(), parts_->prefix_ids.begin(), parts_->prefix_ids.end());
  if (parts_->added.empty()) {
    encode_plain(text, true, out);
  } else {
    parts_->added.split_raw(text, segments_);
    for (const Segment& s : segments_) {
      if (s.token_id >= 0) {
        out.push_back(s.token_id);
      } else {
        encode_plain(text.substr(s.begin, s.end - s.begin), s.begin == 0, out);
      }
    }
  }
  if (add_special_tokens) out.insert(out.end(), parts_->suffix_ids.begin(), parts_->suffix_ids.end());
}

void Encoder::encode_plain(std::string_view text, bool at_start, std::vector<std::int32_t>& out) {
  if (text.empty()) return;
  if (!parts_->normalizer.empty()) {
    // Hugging Face normalizes each span on its own (Prepend applies to each).
    parts_->normalizer.normalize(text, normalized_);
    text = normalized_;
  }
  if (!parts_->added.has_normalized()) {
    encode_span(text, at_start, out);
    return;
  }
  parts_->added.split_normalized(text, normalized_segments_);
  for (const Segment& s : normalized_segments_) {
    if (s.token_id >= 0) {
      out.push_back(s.token_id);
    } else {
      encode_span(text.substr(s.begin, s.end - s.begin), at_start && s.begin == 0, out);
    }
  }
}

void Encoder::encode_span(std::string_view text, bool at_start, std::vector<std::int32_t>& out) {
  if (text.empty()) return;
  const PreTokenizer& pre = parts_->pre_tokenizer;
  text = pre.prepare(text, at_start, prepared_);
  pre.split(text, pieces_, scratch_);
  const bool byte_level = pre.byte_level();
  for (const Piece& p : pieces_) {
    const std::string_view piece = text.substr(p.begin, p.end - p.begin);
    if (auto it = cache_.find(piece); it != cache_.end()) {
      out.insert(out.end(), arena_.begin() + it->second.offset, arena_.begin() + it->second.offset + it->second.length);
      continue;
    }
    const std::size_t start = out.size();
    parts_->model.tokenize(piece, byte_level, out);
    if (piece.size() > kMaxCachedPiece) continue;
    if (cache_.size() >= cache_entries_ || arena_.size() > (std::size_t{1} << 31)) {
      cache_.clear();
      arena_.clear();
    }
    const auto offset = static_cast<std::uint32_t>(arena_.size());
    arena_.insert(arena_.end(), out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
    cache_.emplace(std::string(piece), CacheEntry{offset, static_cast<std::uint32_t>(out.size() - start)});
  }
}

}  // namespace trident::data
