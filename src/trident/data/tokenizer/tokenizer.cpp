#include "trident/data/tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <exception>
#include <thread>
#include <unordered_map>

#include "trident/core/atomic_file.h"
#include "trident/core/error.h"
#include "trident/data/tokenizer/byte_level.h"

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

std::string Tokenizer::wordpiece_json(const std::vector<std::string>& tokens, bool do_lower_case,
                                      std::optional<bool> strip_accents, bool tokenize_chinese_chars) {
  using json = nlohmann::ordered_json;
  json vocab = json::object();
  {
    std::unordered_map<std::string, std::size_t> last;
    for (std::size_t i = 0; i < tokens.size(); ++i) last[tokens[i]] = i;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (last[tokens[i]] == i) vocab[tokens[i]] = static_cast<std::int32_t>(i);
    }
  }
  json added = json::array();
  std::int32_t next = static_cast<std::int32_t>(vocab.size());
  std::unordered_map<std::string, std::int32_t> special_ids;
  // transformers adds the special tokens in the order of its attributes: unk, sep, pad, cls, mask.
  for (const char* t : {"[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"}) {
    const std::int32_t id = vocab.contains(t) ? vocab[t].get<std::int32_t>() : next++;
    special_ids[t] = id;
    added.push_back({{"id", id}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  auto special = [&](const char* t) { return json{{"SpecialToken", {{"id", t}, {"type_id", 0}}}}; };
  auto special1 = [&](const char* t) { return json{{"SpecialToken", {{"id", t}, {"type_id", 1}}}}; };
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "BertNormalizer"},
        {"clean_text", true},
        {"handle_chinese_chars", tokenize_chinese_chars},
        {"strip_accents", strip_accents ? json(*strip_accents) : json(nullptr)},
        {"lowercase", do_lower_case}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {special("[CLS]"), {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, special("[SEP]")}},
        {"pair",
         {special("[CLS]"), {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, special("[SEP]"),
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}, special1("[SEP]")}},
        {"special_tokens",
         {{"[CLS]", {{"id", "[CLS]"}, {"ids", {special_ids["[CLS]"]}}, {"tokens", {"[CLS]"}}}},
          {"[SEP]", {{"id", "[SEP]"}, {"ids", {special_ids["[SEP]"]}}, {"tokens", {"[SEP]"}}}}}}}},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
      {"model",
       {{"type", "WordPiece"},
        {"unk_token", "[UNK]"},
        {"continuing_subword_prefix", "##"},
        {"max_input_chars_per_word", 100},
        {"vocab", vocab}}},
  };
  return j.dump(2, ' ', false);
}

Tokenizer Tokenizer::from_wordpiece_vocab(const std::filesystem::path& vocab_txt, bool do_lower_case) {
  const std::string text = read_whole_file(vocab_txt, "vocabulary file");
  // transformers' load_vocab: one token per line, without its newline; the id is the line number.
  std::vector<std::string> tokens;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    tokens.emplace_back(text.substr(pos, eol - pos));
    pos = eol + 1;
  }
  TRIDENT_CHECK(!tokens.empty(), "{}: empty vocabulary (expected one WordPiece token per line)", vocab_txt.string());
  TRIDENT_CHECK(std::find(tokens.begin(), tokens.end(), "[UNK]") != tokens.end(),
                "{}: the vocabulary has no [UNK] line (WordPiece needs its unknown token)", vocab_txt.string());
  return from_json(wordpiece_json(tokens, do_lower_case), vocab_txt.string());
}

namespace {

// A vocab.txt's do_lower_case: the given value, else tokenizer_config.json's beside it, else true.
bool lower_case_of(const std::filesystem::path& vocab_txt, std::optional<bool> given) {
  if (given) return *given;
  const auto config = vocab_txt.parent_path() / "tokenizer_config.json";
  if (!std::filesystem::exists(config)) return true;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_whole_file(config, "tokenizer config"));
  } catch (const nlohmann::json::exception& e) {
    TRIDENT_FAIL("{}: invalid JSON: {}", config.string(), e.what());
  }
  if (!j.is_object() || !j.contains("do_lower_case")) return true;
  TRIDENT_CHECK(j["do_lower_case"].is_boolean(), "{}: $.do_lower_case: expected true or false, got {}",
                config.string(), j["do_lower_case"].dump());
  return j["do_lower_case"].get<bool>();
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& path, std::optional<bool> do_lower_case) {
  namespace fs = std::filesystem;
  TRIDENT_CHECK(fs::exists(path), "tokenizer '{}' does not exist (expected a tokenizer.json, a vocab.json with "
                "merges.txt beside it, a WordPiece vocab.txt, or a directory holding one)", path.string());
  if (fs::is_directory(path)) {
    if (fs::exists(path / "tokenizer.json")) return from_file(path / "tokenizer.json");
    if (fs::exists(path / "vocab.json") && fs::exists(path / "merges.txt")) {
      return from_gpt2_files(path / "vocab.json", path / "merges.txt");
    }
    TRIDENT_CHECK(fs::exists(path / "vocab.txt"),
                  "directory '{}' holds neither tokenizer.json, vocab.json + merges.txt nor vocab.txt", path.string());
    return from_wordpiece_vocab(path / "vocab.txt", lower_case_of(path / "vocab.txt", do_lower_case));
  }
  if (path.extension() == ".txt") return from_wordpiece_vocab(path, lower_case_of(path, do_lower_case));
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

namespace {

std::size_t template_ids(const std::vector<TemplateItem>& t) {
  std::size_t n = 0;
  for (const auto& item : t) n += item.ids.size();
  return n;
}

void truncate_to(std::vector<std::int32_t>& ids, std::size_t n, bool left) {
  if (ids.size() <= n) return;
  if (left) {
    ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(n));
  } else {
    ids.resize(n);
  }
}

// Hugging Face's truncate_encodings: fit A (and B) into max_length minus the
// template's tokens.
void truncate(const Truncation& t, std::size_t added, std::vector<std::int32_t>& a, std::vector<std::int32_t>* b) {
  const std::size_t max_length = t.max_length > added ? t.max_length - added : 0;
  const std::size_t total = a.size() + (b ? b->size() : 0);
  if (total <= max_length) return;
  const std::size_t to_remove = total - max_length;
  switch (t.strategy) {
    case Truncation::Strategy::longest_first: {
      if (b == nullptr) {
        truncate_to(a, a.size() - to_remove, t.left);
        return;
      }
      std::size_t n1 = a.size(), n2 = b->size();
      const bool swap = n1 > n2;
      if (swap) std::swap(n1, n2);
      n2 = n1 > max_length ? n1 : std::max(n1, max_length - n1);
      if (n1 + n2 > max_length) {
        n1 = max_length / 2;
        n2 = n1 + max_length % 2;
      }
      if (swap) std::swap(n1, n2);
      truncate_to(a, n1, t.left);
      truncate_to(*b, n2, t.left);
      return;
    }
    case Truncation::Strategy::only_first:
    case Truncation::Strategy::only_second: {
      std::vector<std::int32_t>* target = t.strategy == Truncation::Strategy::only_first || b == nullptr ? &a : b;
      TRIDENT_CHECK(target->size() > to_remove,
                    "truncation: the {} sequence has {} tokens, too few to remove the {} over max_length {}",
                    target == &a ? "first" : "second", target->size(), to_remove, t.max_length);
      truncate_to(*target, target->size() - to_remove, t.left);
      return;
    }
  }
}

}  // namespace

std::vector<std::int32_t> Tokenizer::encode_pair(std::string_view a, std::string_view b, bool add_special_tokens,
                                                 std::vector<std::uint32_t>* type_ids) const {
  Encoder enc(*this, 1 << 14);
  std::vector<std::int32_t> out;
  enc.encode_pair(a, b, out, add_special_tokens, type_ids);
  return out;
}

void Encoder::encode_pair(std::string_view a, std::string_view b, std::vector<std::int32_t>& out,
                          bool add_special_tokens, std::vector<std::uint32_t>* type_ids) {
  std::vector<std::int32_t> ids_a, ids_b;
  encode_sequence(a, ids_a);
  encode_sequence(b, ids_b);
  const auto& pair = parts_->pair_template;
  if (parts_->truncation) {
    truncate(*parts_->truncation, add_special_tokens ? template_ids(pair) : 0, ids_a, &ids_b);
  }
  auto put = [&](const std::vector<std::int32_t>& ids, std::uint32_t type) {
    out.insert(out.end(), ids.begin(), ids.end());
    if (type_ids) type_ids->insert(type_ids->end(), ids.size(), type);
  };
  if (!add_special_tokens || pair.empty()) {
    put(ids_a, 0);
    put(ids_b, 1);
    return;
  }
  for (const TemplateItem& item : pair) {
    switch (item.kind) {
      case TemplateItem::Kind::ids: put(item.ids, item.type_id); break;
      case TemplateItem::Kind::sequence_a: put(ids_a, item.type_id); break;
      case TemplateItem::Kind::sequence_b: put(ids_b, item.type_id); break;
    }
  }
}

void Encoder::encode(std::string_view text, std::vector<std::int32_t>& out, bool add_special_tokens) {
  if (truncate_ && parts_->truncation) {
    std::vector<std::int32_t> ids;
    encode_sequence(text, ids);
    const std::size_t added = add_special_tokens ? parts_->prefix_ids.size() + parts_->suffix_ids.size() : 0;
    truncate(*parts_->truncation, added, ids, nullptr);
    if (add_special_tokens) out.insert(out.end(), parts_->prefix_ids.begin(), parts_->prefix_ids.end());
    out.insert(out.end(), ids.begin(), ids.end());
    if (add_special_tokens) out.insert(out.end(), parts_->suffix_ids.begin(), parts_->suffix_ids.end());
    return;
  }
  if (add_special_tokens) out.insert(out.end(), parts_->prefix_ids.begin(), parts_->prefix_ids.end());
  encode_sequence(text, out);
  if (add_special_tokens) out.insert(out.end(), parts_->suffix_ids.begin(), parts_->suffix_ids.end());
}

void Encoder::encode_sequence(std::string_view text, std::vector<std::int32_t>& out) {
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

std::vector<std::vector<std::int32_t>> encode_batch(const Tokenizer& tokenizer, std::span<const std::string_view> texts,
                                                    bool add_special_tokens, int threads) {
  std::vector<std::vector<std::int32_t>> out(texts.size());
  const std::size_t n = texts.size();
  std::size_t workers = threads > 0 ? static_cast<std::size_t>(threads) : std::thread::hardware_concurrency();
  workers = std::max<std::size_t>(1, std::min(workers, n));
  std::vector<std::exception_ptr> errors(workers);
  const auto run = [&](std::size_t w) {
    try {
      Encoder encoder(tokenizer);
      for (std::size_t i = n * w / workers; i < n * (w + 1) / workers; ++i)
        encoder.encode(texts[i], out[i], add_special_tokens);
    } catch (...) {
      errors[w] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(run, w);
  run(0);
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace trident::data
