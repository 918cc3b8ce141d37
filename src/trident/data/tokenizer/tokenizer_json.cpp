// Tokenizer::from_json: reads a Hugging Face tokenizer.json into TokenizerParts.
// Every error names the source, the JSON path and what was expected.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_map>

#include "trident/core/error.h"
#include "trident/data/tokenizer/byte_level.h"
#include "trident/data/tokenizer/tokenizer.h"

namespace trident::data {
namespace {

using json = nlohmann::json;

// A JSON value together with its path, for messages like
// "tokenizer.json: $.model.merges[3]: expected a string, got number 7".
class Node {
 public:
  Node(const json& v, std::string path, const std::string& source) : v_(&v), path_(std::move(path)), source_(&source) {}

  const json& value() const { return *v_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return v_->is_null(); }

  [[noreturn]] void fail(std::string_view expected) const {
    std::string got = v_->dump();
    if (got.size() > 60) got = got.substr(0, 57) + "...";
    TRIDENT_FAIL("{}: {}: expected {}, got {} {}", *source_, path_, expected, v_->type_name(), got);
  }
  [[noreturn]] void unsupported(std::string_view what) const {
    TRIDENT_FAIL("{}: {}: {} is not supported by trident's tokenizer", *source_, path_, what);
  }

  Node at(std::string_view key) const {
    if (!v_->is_object()) fail("an object");
    auto it = v_->find(key);
    if (it == v_->end()) {
      TRIDENT_FAIL("{}: {}: missing required key \"{}\"", *source_, path_, key);
    }
    return Node(*it, path_ + "." + std::string(key), *source_);
  }
  // A key that may be absent (then null is returned).
  Node opt(std::string_view key) const {
    if (!v_->is_object()) fail("an object");
    auto it = v_->find(key);
    static const json null_value;
    return Node(it == v_->end() ? null_value : *it, path_ + "." + std::string(key), *source_);
  }
  Node child(const json& v, std::string path) const { return Node(v, std::move(path), *source_); }
  const std::string& source() const { return *source_; }
  Node operator[](std::size_t i) const { return Node((*v_)[i], fmt::format("{}[{}]", path_, i), *source_); }
  std::size_t size() const { return v_->size(); }

  const json::array_t& array() const {
    if (!v_->is_array()) fail("an array");
    return v_->get_ref<const json::array_t&>();
  }
  std::string string() const {
    if (!v_->is_string()) fail("a string");
    return v_->get<std::string>();
  }
  bool boolean(bool default_value) const {
    if (v_->is_null()) return default_value;
    if (!v_->is_boolean()) fail("true or false");
    return v_->get<bool>();
  }
  std::int32_t id() const {
    // Ids index dense tables: a huge id would allocate gigabytes (found by fuzzing).
    if (!v_->is_number_integer() || v_->get<std::int64_t>() < 0 || v_->get<std::int64_t>() >= kMaxTokenId) {
      fail("a token id (integer in [0, 2^24))");
    }
    return v_->get<std::int32_t>();
  }
  std::string type() const { return at("type").string(); }
  // A string of exactly one character.
  char32_t character() const {
    const std::string s = string();
    char32_t c = 0;
    if (s.empty() || decode_utf8(s, 0, c) != s.size()) fail("a string of one character");
    return c;
  }
  std::size_t count() const {
    if (!v_->is_number_unsigned() || v_->get<std::uint64_t>() > (1u << 30)) fail("a non-negative integer");
    return v_->get<std::size_t>();
  }
  // A Replace step's {"String": ...} pattern (non-empty).
  std::string string_pattern() const {
    if (!opt("Regex").is_null()) at("Regex").unsupported("a Regex pattern in Replace (only String)");
    std::string p = at("String").string();
    if (p.empty()) at("String").unsupported("an empty Replace pattern");
    return p;
  }

 private:
  const json* v_;
  std::string path_;
  const std::string* source_;
};

// A literal string as a PCRE2 pattern.
std::string escape_regex(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{{{:02x}}}", c);
    }
  }
  return out;
}

Vocab parse_vocab(const Node& vocab_node) {
  if (!vocab_node.value().is_object()) vocab_node.fail("an object of token -> id");
  Vocab vocab;
  vocab.reserve(vocab_node.size());
  for (const auto& [token, id] : vocab_node.value().items()) {
    vocab.emplace(token, vocab_node.child(id, fmt::format("{}[\"{}\"]", vocab_node.path(), token)).id());
  }
  return vocab;
}

WordPieceModel parse_wordpiece(const Node& m) {
  WordPieceOptions options;
  if (const Node u = m.opt("unk_token"); !u.is_null()) options.unk_token = u.string();
  if (const Node p = m.opt("continuing_subword_prefix"); !p.is_null()) options.continuing_subword_prefix = p.string();
  if (const Node n = m.opt("max_input_chars_per_word"); !n.is_null()) options.max_input_chars_per_word = n.count();
  const Node vocab_node = m.at("vocab");
  Vocab vocab = parse_vocab(vocab_node);
  if (!vocab.count(options.unk_token)) {
    // Hugging Face fails only when a word is unknown; refusing the file up front names the key.
    m.opt("unk_token").fail(fmt::format("a token of the vocabulary (the unknown token \"{}\")", options.unk_token));
  }
  return WordPieceModel(std::move(vocab), std::move(options), vocab_node.source() + ": " + vocab_node.path());
}

Model parse_model(const Node& m) {
  if (!m.opt("type").is_null() && m.type() == "WordPiece") return parse_wordpiece(m);
  if (!m.opt("type").is_null() && m.type() != "BPE") {
    m.at("type").unsupported(fmt::format("model type \"{}\" (only BPE and WordPiece)", m.type()));
  }
  if (const Node d = m.opt("dropout"); !d.is_null()) {
    if (!d.value().is_number()) d.fail("null or a number");
    if (d.value().get<double>() != 0.0) d.unsupported("BPE dropout (it makes encoding random)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Node n = m.opt(key);
    if (!n.is_null() && !n.string().empty()) n.unsupported(fmt::format("a non-empty {}", key));
  }
  BpeOptions options;
  if (const Node u = m.opt("unk_token"); !u.is_null()) options.unk_token = u.string();
  options.fuse_unk = m.opt("fuse_unk").boolean(false);
  options.byte_fallback = m.opt("byte_fallback").boolean(false);
  options.ignore_merges = m.opt("ignore_merges").boolean(false);

  const Node vocab_node = m.at("vocab");
  Vocab vocab = parse_vocab(vocab_node);
  if (options.unk_token && !vocab.count(*options.unk_token)) {
    // Hugging Face fails only when a character is unknown; refusing the file up front names the key.
    m.at("unk_token").fail("a token of the vocabulary");
  }
  const Node merges_node = m.at("merges");
  const auto& arr = merges_node.array();
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const Node e = merges_node[i];
    if (e.value().is_string()) {
      // Legacy form "left right": exactly one space.
      const std::string s = e.string();
      const std::size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos) {
        e.fail("a merge \"LEFT RIGHT\" (two tokens separated by one space)");
      }
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.value().is_array() && e.size() == 2 && e.value()[0].is_string() && e.value()[1].is_string()) {
      merges.emplace_back(e.value()[0].get<std::string>(), e.value()[1].get<std::string>());
    } else {
      e.fail("a merge: \"LEFT RIGHT\" or [\"LEFT\", \"RIGHT\"]");
    }
  }
  const std::string where = merges_node.source() + ": " + merges_node.path();
  return BpeModel(std::move(vocab), merges, std::move(options),
                  [&](std::size_t i) { return fmt::format("{}[{}]", where, i); },
                  vocab_node.source() + ": " + vocab_node.path());
}

// Hugging Face does not trust the ids stored with added tokens: a token in the
// model vocabulary gets its id there, any other the next free id counting up
// from the size of the model vocabulary (AddedVocabulary::add_tokens), and an
// empty token is ignored. Loading does the same, so a hand-edited file encodes
// exactly as Hugging Face encodes it. A content listed twice keeps one id and
// the last entry's flags (Hugging Face keeps one token per id, replaced by each
// later entry), but stays special once any entry said so (its set of special
// contents only grows).
std::vector<AddedToken> parse_added_tokens(const Node& n, const Model& model) {
  std::vector<AddedToken> out;
  if (n.is_null()) return out;
  std::unordered_map<std::string, std::size_t> index;  // content -> position in out
  auto next_id = static_cast<std::int32_t>(model.vocab().size());
  const auto& arr = n.array();
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const Node t = n[i];
    AddedToken a;
    a.id = t.at("id").id();
    a.content = t.at("content").string();
    a.single_word = t.opt("single_word").boolean(false);
    a.lstrip = t.opt("lstrip").boolean(false);
    a.rstrip = t.opt("rstrip").boolean(false);
    a.special = t.opt("special").boolean(false);
    a.normalized = t.opt("normalized").boolean(!a.special);
    if (a.content.empty()) continue;
    if (auto it = index.find(a.content); it != index.end()) {
      AddedToken& prev = out[it->second];
      a.id = prev.id;
      a.special = a.special || prev.special;
      prev = std::move(a);
      continue;
    }
    if (auto id = model.token_to_id(a.content)) {
      a.id = *id;
    } else {
      a.id = next_id++;
      // With gaps in the vocabulary's ids, that rule can land on another token's id: both would then
      // encode to one id that decodes to the added token (Hugging Face accepts such a file).
      if (const std::string* other = model.id_to_token(a.id)) {
        TRIDENT_FAIL("{}: {}: added token '{}' gets id {} (an added token missing from $.model.vocab is numbered "
                     "from the vocabulary's size, {}, as in Hugging Face), but '{}' in $.model.vocab has id {} too",
                     t.source(), t.path(), a.content, a.id, model.vocab().size(), *other, a.id);
      }
    }
    index.emplace(a.content, out.size());
    out.push_back(std::move(a));
  }
  return out;
}

void parse_normalizer(const Node& n, Normalizer& norm) {
  if (n.is_null()) return;
  const std::string type = n.type();
  if (type == "Sequence") {
    const Node list = n.at("normalizers");
    for (std::size_t i = 0; i < list.array().size(); ++i) parse_normalizer(list[i], norm);
  } else if (type == "Prepend") {
    norm.add_prepend(n.at("prepend").string());
  } else if (type == "Replace") {
    norm.add_replace(n.at("pattern").string_pattern(), n.at("content").string());
  } else if (type == "NFC") {
    norm.add_nfc();
  } else if (type == "BertNormalizer") {
    BertNormalizerOptions o;
    o.clean_text = n.opt("clean_text").boolean(true);
    o.handle_chinese_chars = n.opt("handle_chinese_chars").boolean(true);
    o.lowercase = n.opt("lowercase").boolean(true);
    o.strip_accents = n.opt("strip_accents").boolean(o.lowercase);  // null: as lowercase (Hugging Face)
    norm.add_bert(o);
  } else {
    n.at("type").unsupported(fmt::format("normalizer \"{}\"", type));
  }
}

// Metaspace's prepend_scheme, or its older add_prefix_space, read as Hugging Face does.
PrependScheme parse_prepend_scheme(const Node& n) {
  PrependScheme scheme = PrependScheme::always;  // Hugging Face's default
  if (const Node p = n.opt("prepend_scheme"); !p.is_null()) {
    const std::string s = p.string();
    if (s == "always") {
      scheme = PrependScheme::always;
    } else if (s == "first") {
      scheme = PrependScheme::first;
    } else if (s == "never") {
      scheme = PrependScheme::never;
    } else {
      p.fail("one of \"always\", \"first\", \"never\"");
    }
  }
  if (const Node a = n.opt("add_prefix_space"); !a.boolean(true)) {
    // Hugging Face refuses this too ("add_prefix_space does not match declared prepend_scheme").
    if (scheme != PrependScheme::never) a.fail("true, or false with prepend_scheme \"never\"");
    scheme = PrependScheme::never;
  }
  return scheme;
}

SplitBehavior parse_behavior(const Node& n) {
  const std::string b = n.string();
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  n.fail("one of Isolated, Removed, Contiguous, MergedWithPrevious, MergedWithNext");
}

void parse_pre_tokenizer(const Node& n, PreTokenizer& pre) {
  if (n.is_null()) return;
  const std::string type = n.type();
  if (type != "Sequence" && pre.byte_level()) {
    // Hugging Face would run this step on the byte-level characters (a space
    // is "\u0120" by then); trident's steps all see the raw text.
    n.at("type").unsupported("a pre-tokenizer after ByteLevel");
  }
  if (type == "Sequence") {
    const Node list = n.at("pretokenizers");
    for (std::size_t i = 0; i < list.array().size(); ++i) parse_pre_tokenizer(list[i], pre);
  } else if (type == "ByteLevel") {
    try {
      pre.add_byte_level(n.opt("add_prefix_space").boolean(true), n.opt("use_regex").boolean(true));
    } catch (const Error&) {
      n.at("add_prefix_space").unsupported("add_prefix_space=true on a ByteLevel step that is not the first");
    }
  } else if (type == "Split") {
    const Node pattern = n.at("pattern");
    std::string regex;
    if (!pattern.opt("Regex").is_null()) {
      regex = pattern.at("Regex").string();
    } else if (!pattern.opt("String").is_null()) {
      regex = escape_regex(pattern.at("String").string());
    } else {
      pattern.fail("{\"Regex\": ...} or {\"String\": ...}");
    }
    try {
      pre.add_split(regex, parse_behavior(n.at("behavior")), n.opt("invert").boolean(false));
    } catch (const Error& e) {
      TRIDENT_FAIL("{}: {}: {}", pattern.source(), pattern.path(), e.message());
    }
  } else if (type == "BertPreTokenizer") {
    pre.add_bert();
  } else if (type == "Metaspace") {
    if (!pre.empty()) n.at("type").unsupported("a Metaspace pre-tokenizer that is not the first step");
    pre.add_metaspace(n.at("replacement").character(), parse_prepend_scheme(n), n.opt("split").boolean(true));
  } else {
    n.at("type").unsupported(fmt::format("pre-tokenizer \"{}\"", type));
  }
}

void parse_decoder(const Node& n, Decoder& d) {
  if (n.is_null()) return;
  const std::string type = n.type();
  if (type == "Sequence") {
    const Node list = n.at("decoders");
    for (std::size_t i = 0; i < list.array().size(); ++i) parse_decoder(list[i], d);
    return;
  }
  // trident's ByteLevel decoder yields raw bytes, which later steps would see differently.
  if (type == "ByteLevel" && !d.empty()) n.at("type").unsupported("a ByteLevel decoder after other decoders");
  if (type != "ByteLevel" && d.byte_level()) n.at("type").unsupported("a decoder after ByteLevel");
  if (type == "ByteLevel") {
    d.add_byte_level();
  } else if (type == "Replace") {
    d.add_replace(n.at("pattern").string_pattern(), n.at("content").string());
  } else if (type == "ByteFallback") {
    d.add_byte_fallback();
  } else if (type == "Fuse") {
    d.add_fuse();
  } else if (type == "Strip") {
    d.add_strip(n.at("content").character(), n.at("start").count(), n.at("stop").count());
  } else if (type == "WordPiece") {
    d.add_wordpiece(n.opt("prefix").is_null() ? "##" : n.at("prefix").string(), n.opt("cleanup").boolean(true));
  } else if (type == "Metaspace") {
    d.add_metaspace(n.at("replacement").character(), parse_prepend_scheme(n) != PrependScheme::never);
  } else {
    n.at("type").unsupported(fmt::format("decoder \"{}\"", type));
  }
}

// The ids a post-processor puts around a single sequence.
void parse_post_processor(const Node& n, TokenizerParts& parts) {
  if (n.is_null()) return;
  const std::string type = n.type();
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "Sequence") {
    const Node list = n.at("processors");
    for (std::size_t i = 0; i < list.array().size(); ++i) parse_post_processor(list[i], parts);
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const Node cls = n.at("cls"), sep = n.at("sep");
    if (!cls.value().is_array() || cls.size() != 2) cls.fail("[token, id]");
    if (!sep.value().is_array() || sep.size() != 2) sep.fail("[token, id]");
    const std::int32_t c = cls[1].id(), s = sep[1].id();
    parts.prefix_ids.push_back(c);
    parts.suffix_ids.push_back(s);
    using K = TemplateItem::Kind;
    if (type == "BertProcessing") {  // [CLS] A [SEP] B:1 [SEP]:1
      parts.pair_template = {{K::ids, {c}, 0}, {K::sequence_a, {}, 0}, {K::ids, {s}, 0}, {K::sequence_b, {}, 1},
                             {K::ids, {s}, 1}};
    } else {  // <s> A </s> </s> B </s>, all type 0
      parts.pair_template = {{K::ids, {c}, 0}, {K::sequence_a, {}, 0}, {K::ids, {s, s}, 0}, {K::sequence_b, {}, 0},
                             {K::ids, {s}, 0}};
    }
    return;
  }
  if (type == "TemplateProcessing") {
    const Node single = n.at("single");
    const Node specials = n.at("special_tokens");
    bool seen_sequence = false;
    for (std::size_t i = 0; i < single.array().size(); ++i) {
      const Node item = single[i];
      if (!item.opt("Sequence").is_null()) {
        if (seen_sequence) item.fail("a single-sequence template with one Sequence");
        seen_sequence = true;
      } else if (!item.opt("SpecialToken").is_null()) {
        const std::string name = item.at("SpecialToken").at("id").string();
        const Node spec = specials.at(name);
        const Node ids = spec.at("ids");
        auto& target = seen_sequence ? parts.suffix_ids : parts.prefix_ids;
        for (std::size_t k = 0; k < ids.array().size(); ++k) target.push_back(ids[k].id());
      } else {
        item.fail("{\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (const Node pair = n.opt("pair"); !pair.is_null()) {
      using K = TemplateItem::Kind;
      for (std::size_t i = 0; i < pair.array().size(); ++i) {
        const Node item = pair[i];
        TemplateItem t;
        if (!item.opt("Sequence").is_null()) {
          const Node seq = item.at("Sequence");
          const std::string id = seq.at("id").string();
          if (id != "A" && id != "B") seq.at("id").fail("\"A\" or \"B\"");
          t.kind = id == "A" ? K::sequence_a : K::sequence_b;
          t.type_id = static_cast<std::uint32_t>(seq.opt("type_id").is_null() ? 0 : seq.at("type_id").count());
        } else if (!item.opt("SpecialToken").is_null()) {
          const Node tok = item.at("SpecialToken");
          const Node ids = specials.at(tok.at("id").string()).at("ids");
          for (std::size_t k = 0; k < ids.array().size(); ++k) t.ids.push_back(ids[k].id());
          t.type_id = static_cast<std::uint32_t>(tok.opt("type_id").is_null() ? 0 : tok.at("type_id").count());
        } else {
          item.fail("{\"Sequence\": ...} or {\"SpecialToken\": ...}");
        }
        parts.pair_template.push_back(std::move(t));
      }
    }
    return;
  }
  n.at("type").unsupported(fmt::format("post-processor \"{}\"", type));
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view json_text, std::string_view source_view) {
  const std::string source(source_view);
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    TRIDENT_FAIL("{}: invalid JSON at byte {}: {}", source, e.byte, e.what());
  } catch (const json::exception& e) {  // e.g. out_of_range: a number too large
    TRIDENT_FAIL("{}: invalid JSON: {}", source, e.what());
  }
  const Node root(j, "$", source);
  if (!j.is_object()) root.fail("a tokenizer.json object");
  TokenizerParts parts;
  parts.model = parse_model(root.at("model"));
  parse_normalizer(root.opt("normalizer"), parts.normalizer);
  parts.added = AddedVocabulary(parse_added_tokens(root.opt("added_tokens"), parts.model), &parts.normalizer);
  parse_pre_tokenizer(root.opt("pre_tokenizer"), parts.pre_tokenizer);
  if (!parts.normalizer.empty() && parts.pre_tokenizer.metaspace() &&
      parts.pre_tokenizer.prepend_scheme() == PrependScheme::first) {
    // "first" asks whether a span starts at offset 0 of the original text,
    // which a normalizer's edits make ambiguous; no published tokenizer has both.
    root.at("pre_tokenizer").unsupported("a Metaspace pre-tokenizer with prepend_scheme \"first\" after a normalizer");
  }
  parse_decoder(root.opt("decoder"), parts.decoder);
  parse_post_processor(root.opt("post_processor"), parts);
  if (const Node t = root.opt("truncation"); !t.is_null()) {
    Truncation tr;
    tr.max_length = t.at("max_length").count();
    if (const Node s = t.opt("strategy"); !s.is_null()) {
      const std::string v = s.string();
      if (v == "LongestFirst") {
        tr.strategy = Truncation::Strategy::longest_first;
      } else if (v == "OnlyFirst") {
        tr.strategy = Truncation::Strategy::only_first;
      } else if (v == "OnlySecond") {
        tr.strategy = Truncation::Strategy::only_second;
      } else {
        s.fail("one of \"LongestFirst\", \"OnlyFirst\", \"OnlySecond\"");
      }
    }
    if (const Node d = t.opt("direction"); !d.is_null()) {
      const std::string v = d.string();
      if (v != "Left" && v != "Right") d.fail("\"Left\" or \"Right\"");
      tr.left = v == "Left";
    }
    parts.truncation = tr;
  }
  const std::int32_t bound = [&] {
    std::int32_t b = parts.model.id_bound();
    for (const auto& t : parts.added.tokens()) b = std::max(b, t.id + 1);
    return b;
  }();
  // Every id the post-processor adds must decode: an id in a gap of the vocabulary would be written
  // into every encoded document and fail only when someone decodes it.
  auto has_token = [&](std::int32_t id) {
    if (parts.model.id_to_token(id) != nullptr) return true;
    return std::any_of(parts.added.tokens().begin(), parts.added.tokens().end(),
                       [&](const AddedToken& t) { return t.id == id; });
  };
  std::vector<std::int32_t> pair_ids;
  for (const auto& item : parts.pair_template) pair_ids.insert(pair_ids.end(), item.ids.begin(), item.ids.end());
  for (const auto* ids : {&parts.prefix_ids, &parts.suffix_ids, &pair_ids}) {
    for (std::int32_t id : *ids) {
      TRIDENT_CHECK(id < bound, "{}: $.post_processor: special token id {} is outside the vocabulary (size {})",
                    source, id, bound);
      TRIDENT_CHECK(has_token(id), "{}: $.post_processor: special token id {} is no token's id (neither in "
                    "$.model.vocab nor in $.added_tokens)", source, id);
    }
  }
  return Tokenizer(std::move(parts));
}

}  // namespace trident::data
