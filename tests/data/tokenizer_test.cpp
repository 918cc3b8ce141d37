#include "trident/data/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "trident/core/error.h"
#include "trident/data/tokenizer/bpe_trainer.h"
#include "trident/data/tokenizer/byte_level.h"
#include "trident/data/tokenizer/unicode_compat.h"

namespace trident::data {
namespace {

using testing::error_of;

// A byte-level tokenizer.json: the 256 byte characters (ids 0..255) plus
// the given merges; "<|endoftext|>" is special token 1000 (in the vocabulary).
std::string byte_level_json(const std::vector<std::pair<std::string, std::string>>& merges, bool prefix_space = false) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[std::string(byte_to_utf8(static_cast<std::uint8_t>(b)))] = b;
  vocab["<|endoftext|>"] = 1000;  // also an added token: it keeps this id
  nlohmann::json m = nlohmann::json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    m.push_back(nlohmann::json::array({a, b}));
  }
  nlohmann::json j = {
      {"added_tokens", {{{"id", 1000}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", prefix_space}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}},
  };
  return j.dump();
}

TEST(ByteLevel, Gpt2Table) {
  EXPECT_EQ(byte_to_char(' '), U'\u0120');
  EXPECT_EQ(byte_to_char('\n'), U'\u010A');
  EXPECT_EQ(byte_to_char('!'), U'!');
  EXPECT_EQ(byte_to_char(0xAD), U'\u0143');
  EXPECT_EQ(byte_to_char(0xFF), U'\u00FF');
  for (int b = 0; b < 256; ++b) EXPECT_EQ(char_to_byte(byte_to_char(static_cast<std::uint8_t>(b))), b);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(byte_level_to_bytes(bytes_to_byte_level(all)), all);
  EXPECT_FALSE(byte_level_to_bytes("a b"));  // ' ' is not a byte-level character
}

TEST(UnicodeCompat, WidensLettersAndNumbersInAndOutOfClasses) {
  const std::string a = align_unicode_classes(R"( ?\p{L}+|[^\s\p{L}\p{N}]+|\pN|\P{L}|\p{Lu}|[\]\p{L}]|\Q\p{L}\E)");
  EXPECT_EQ(a.rfind(R"( ?[\p{L}\x{1C89}-\x{1C8A})", 0), 0u) << a;
  EXPECT_NE(a.find(R"([^\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\p{L}\x{1C89}-)"), std::string::npos) << a;
  EXPECT_NE(a.find(R"(\p{N}\x{10D40}-\x{10D49})"), std::string::npos) << a;
  EXPECT_NE(a.find(R"(|[\p{N}\x{10D40}-)"), std::string::npos) << a;  // \pN outside a class
  EXPECT_NE(a.find(R"(|[^\p{L}\x{1C89}-)"), std::string::npos) << a;  // \P{L} outside a class
  EXPECT_NE(a.find(R"(|\p{Lu}|)"), std::string::npos) << a;           // other properties untouched
  EXPECT_NE(a.find(R"([\]\p{L}\x{1C89}-)"), std::string::npos) << a;  // escaped ] stays in the class
  EXPECT_NE(a.find(R"(\Q\p{L}\E)"), std::string::npos) << a;          // literal text untouched
  // A letter from Unicode 16 (Garay, U+10D50) is a letter for GPT-2's pattern, as in Hugging Face.
  PreTokenizer pre = PreTokenizer::gpt2();
  PreTokenizer::Scratch scratch;
  std::vector<Piece> pieces;
  pre.split("ab\xF0\x90\xB5\x90" "cd", pieces, scratch);
  EXPECT_EQ(pieces.size(), 1u);
  // U+180E is not white space (since Unicode 6.3): "a\u180e b" is "a", "\u180e", " b".
  pre.split("a\xE1\xA0\x8E b", pieces, scratch);
  EXPECT_EQ(pieces.size(), 3u);
}

TEST(Tokenizer, MergesByRankLeftmostFirst) {
  // "aaa": (a,a) merges at the leftmost position first -> [aa, a].
  auto tok = Tokenizer::from_json(byte_level_json({{"a", "a"}, {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}}));
  auto id = [&](std::string_view t) { return *tok.token_to_id(t); };
  EXPECT_EQ(tok.encode("aaa"), (std::vector<std::int32_t>{id("aa"), 'a'}));
  EXPECT_EQ(tok.encode("hello"), (std::vector<std::int32_t>{id("hello")}));
  // GPT-2 splitting: " hello" is a piece of its own; Ġ has no merge with 'h'.
  EXPECT_EQ(tok.encode("hello hello"), (std::vector<std::int32_t>{id("hello"), ' ', id("hello")}));
  EXPECT_EQ(tok.encode("x<|endoftext|>y"), (std::vector<std::int32_t>{'x', 1000, 'y'}));
  EXPECT_EQ(tok.decode(std::vector<std::int32_t>{'x', 1000, 'y'}), "x<|endoftext|>y");
  EXPECT_EQ(tok.decode(std::vector<std::int32_t>{'x', 1000, 'y'}, true), "xy");
  EXPECT_EQ(tok.vocab_size(), 1001);
  EXPECT_EQ(tok.eod_id(), 1000);
}

TEST(Tokenizer, AddedTokenIdsFollowHuggingFace) {
  // Hugging Face ignores a stored id that disagrees with its assignment rule:
  // a token outside the model vocabulary gets the next id counting up from the
  // vocabulary's size (257 here: 256 bytes and <|endoftext|>, which has id 1000),
  // not from the largest id; an empty token is ignored (tokenizers 0.23.3).
  auto j = nlohmann::json::parse(byte_level_json({}));
  j["added_tokens"].push_back({{"id", 5000}, {"content", ""}, {"special", false}});
  j["added_tokens"].push_back({{"id", 5000}, {"content", "<x>"}, {"special", false}});
  j["added_tokens"].push_back({{"id", 5001}, {"content", "<y>"}, {"special", false}});
  auto tok = Tokenizer::from_json(j.dump());
  EXPECT_EQ(tok.token_to_id("<x>"), 257);
  EXPECT_EQ(tok.token_to_id("<y>"), 258);
  EXPECT_EQ(tok.encode("a<x>"), (std::vector<std::int32_t>{'a', 257}));
  EXPECT_EQ(tok.parts().added.tokens().size(), 3u);
}

TEST(Tokenizer, RejectsTwoTokensOnOneId) {
  // Hugging Face accepts a vocabulary with two tokens on one id; decoding that id then gives one of
  // them for both ("x applies publisher" came back as "x publisher publisher"). The error names both
  // tokens, the id and the file.
  auto j = nlohmann::json::parse(byte_level_json({{"a", "b"}}));
  j["model"]["vocab"]["ab"] = 'c';
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); })
                .find("t.json: $.model.vocab: tokens 'ab' and 'c' both have id 99"),
            std::string::npos);
}

TEST(Tokenizer, RejectsAnAddedTokenNumberedOntoAVocabularyId) {
  // A gap in the vocabulary's ids (0..255, then 258 and 1000) makes Hugging Face's rule number the
  // added token "<x>" from the vocabulary's size, 258: the id of "qq" in the vocabulary. Both would
  // encode to 258, which decodes to "<x>".
  auto j = nlohmann::json::parse(byte_level_json({}));
  j["model"]["vocab"]["qq"] = 258;
  j["added_tokens"].push_back({{"id", 1001}, {"content", "<x>"}, {"special", true}});
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); })
                .find("t.json: $.added_tokens[1]: added token '<x>' gets id 258 (an added token missing from "
                      "$.model.vocab is numbered from the vocabulary's size, 258, as in Hugging Face), but 'qq' in "
                      "$.model.vocab has id 258 too"),
            std::string::npos);
  // Without the collision (the gap starts at the size) the same token is fine.
  j["model"]["vocab"]["qq"] = 259;
  j["added_tokens"][1]["id"] = 1001;
  EXPECT_EQ(Tokenizer::from_json(j.dump(), "t.json").token_to_id("<x>"), 258);
}

TEST(Tokenizer, RejectsAPostProcessorIdWithNoToken) {
  // Id 500 lies in the gap between the bytes and <|endoftext|> (1000): every encoded document would
  // start with an id that nothing decodes.
  auto j = nlohmann::json::parse(byte_level_json({}));
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {500}}, {"tokens", {"<s>"}}}}}}};
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); })
                .find("t.json: $.post_processor: special token id 500 is no token's id"),
            std::string::npos);
  j["post_processor"]["special_tokens"]["<s>"]["ids"] = {1000};
  EXPECT_EQ(Tokenizer::from_json(j.dump(), "t.json").encode("a").front(), 1000);
}

TEST(Tokenizer, RepeatedAddedTokenTakesTheLastEntrysFlags) {
  // tokenizers 0.23.3 keeps one token per id, replaced by each later entry:
  // "<x>" listed with lstrip/rstrip and then without strips nothing.
  auto j = nlohmann::json::parse(byte_level_json({}));
  j["added_tokens"].push_back(
      {{"id", 1001}, {"content", "<x>"}, {"lstrip", true}, {"rstrip", true}, {"special", true}});
  j["added_tokens"].push_back({{"id", 1001}, {"content", "<x>"}, {"special", false}});
  auto tok = Tokenizer::from_json(j.dump());
  const std::int32_t x = *tok.token_to_id("<x>");
  EXPECT_EQ(x, 257);
  EXPECT_EQ(tok.encode("a <x> b"), (std::vector<std::int32_t>{'a', 0x20, x, 0x20, 'b'}));
  EXPECT_EQ(tok.vocab_size(), 1001);  // one id for both entries
  // ... but its set of special contents only grows: still skipped as special.
  EXPECT_TRUE(tok.is_special(x));
  EXPECT_EQ(tok.decode(std::vector<std::int32_t>{'a', x}, true), "a");
  // The other order: the strips apply.
  std::swap(j["added_tokens"][1], j["added_tokens"][2]);
  tok = Tokenizer::from_json(j.dump());
  EXPECT_EQ(tok.encode("a <x> b"), (std::vector<std::int32_t>{'a', x, 'b'}));
}

TEST(Tokenizer, RejectedSingleWordMatchIsNotRescanned) {
  // Hugging Face's matcher is non-overlapping: a single_word match rejected
  // for touching a word character still consumes its bytes, so "b c" (which
  // starts inside the rejected "ab") is not cut out of "xab c" (checked with
  // tokenizers 0.23: [x, a, b, Ġ, c]).
  auto j = nlohmann::json::parse(byte_level_json({}));
  j["added_tokens"].push_back({{"id", 1001}, {"content", "ab"}, {"single_word", true}, {"special", true}});
  j["added_tokens"].push_back({{"id", 1002}, {"content", "b c"}, {"special", true}});
  auto tok = Tokenizer::from_json(j.dump());
  const std::int32_t t1 = 257;  // the id Hugging Face assigns (after the 257 vocabulary tokens)
  EXPECT_EQ(tok.encode("xab c"), (std::vector<std::int32_t>{'x', 'a', 'b', 0x20, 'c'}));
  EXPECT_EQ(tok.encode("ab c"), (std::vector<std::int32_t>{t1, 0x20, 'c'}));
}

TEST(Tokenizer, SearchResumesAtMatchEndNotAfterRstrip) {
  // Hugging Face's matcher resumes right after a match, not after the white
  // space rstrip absorbed, so a token may start inside that white space (and
  // the white space is then covered twice). tokenizers 0.23: "<a>  <b>" is
  // [<a>, " <b>"]; with " " an added token, "<a>   z" is [<a>, " ", " ", " ", z].
  auto j = nlohmann::json::parse(byte_level_json({}));
  j["added_tokens"].push_back({{"id", 1001}, {"content", "<a>"}, {"rstrip", true}, {"special", true}});
  j["added_tokens"].push_back({{"id", 1002}, {"content", " <b>"}, {"special", true}});
  auto tok = Tokenizer::from_json(j.dump());
  const std::int32_t t1 = 257, t2 = 258;
  EXPECT_EQ(tok.encode("<a> <b>"), (std::vector<std::int32_t>{t1, t2}));
  EXPECT_EQ(tok.encode("<a>  <b>"), (std::vector<std::int32_t>{t1, t2}));
  j["added_tokens"][2]["content"] = " ";
  tok = Tokenizer::from_json(j.dump());
  EXPECT_EQ(tok.encode("<a>   z"), (std::vector<std::int32_t>{t1, t2, t2, t2, 'z'}));
  EXPECT_EQ(tok.encode("x <a>"), (std::vector<std::int32_t>{'x', t2, t1}));
  // An lstrip token inside the absorbed white space becomes empty and is dropped.
  j["added_tokens"][2]["lstrip"] = true;
  tok = Tokenizer::from_json(j.dump());
  EXPECT_EQ(tok.encode("<a> z"), (std::vector<std::int32_t>{t1, 'z'}));
  j["added_tokens"][2]["rstrip"] = true;
  tok = Tokenizer::from_json(j.dump());
  EXPECT_EQ(tok.encode("1   a"), (std::vector<std::int32_t>{'1', t2, 'a'}));
}

// The texts of the pieces `pre` splits `text` into.
std::vector<std::string> split_texts(const PreTokenizer& pre, const std::string& text) {
  PreTokenizer::Scratch scratch;
  std::vector<Piece> pieces;
  pre.split(text, pieces, scratch);
  std::vector<std::string> got;
  for (const auto& p : pieces) got.emplace_back(text.substr(p.begin, p.end - p.begin));
  return got;
}

TEST(Tokenizer, ContractionsAndSpaces) {
  auto tok = Tokenizer::from_json(byte_level_json({}));
  EXPECT_EQ(split_texts(PreTokenizer::gpt2(), "I'll   go\n\n  now 123"),
            (std::vector<std::string>{"I", "'ll", "  ", " go", "\n\n ", " now", " 123"}));
}

TEST(Tokenizer, AnyBytesRoundTrip) {
  auto tok = Tokenizer::from_json(byte_level_json({{"a", "b"}, {"\xC4\xA0", "a"}}));
  std::string bytes = "ab \xff\xfe ab \xc3\x28 x\xe2\x82 \xed\xa0\x80 <|endoftext|> end";
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
  EXPECT_EQ(tok.decode(tok.encode(bytes)), bytes);
  // Invalid bytes are pieces of their own; valid text around them is unaffected.
  const auto ids = tok.encode("ab\xff" "ab");
  EXPECT_EQ(ids, (std::vector<std::int32_t>{*tok.token_to_id("ab"), 0xff, *tok.token_to_id("ab")}));
}

// Byte-level tokens may hold part of a character: the stream shows it once its bytes are all there.
TEST(Tokenizer, DecodeStreamWaitsForWholeCharacters) {
  auto tok = Tokenizer::from_json(byte_level_json({}));
  const auto ids = tok.encode("a\xC3\xA9\xE2\x82\xAC!");  // a é € !
  ASSERT_EQ(ids.size(), 7u);
  DecodeStream stream(tok, {});
  std::vector<std::string> pieces;
  for (std::int32_t id : ids) pieces.push_back(stream.step(id));
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "", "\xC3\xA9", "", "", "\xE2\x82\xAC", "!"}));
  EXPECT_EQ(stream.finish(), "");
  EXPECT_EQ(stream.step(0xF0), "");
  EXPECT_EQ(stream.finish(), "\xF0");  // never completed: shown as it is at the end
}

TEST(Tokenizer, PrefixSpace) {
  auto tok = Tokenizer::from_json(byte_level_json({{"\xC4\xA0", "a"}}, true));
  EXPECT_EQ(tok.encode("a"), (std::vector<std::int32_t>{*tok.token_to_id("\xC4\xA0" "a")}));
  EXPECT_EQ(tok.encode(" a"), tok.encode("a"));
}

TEST(Tokenizer, SplitContiguousInvertedMergesAdjacentPieces) {
  // Hugging Face's Contiguous joins neighbouring parts that are both matches or
  // both not; with invert, adjacent regex matches become adjacent non-matches:
  // "aab" with String "a" inverted is "aa", "b" (tokenizers 0.23).
  auto j = nlohmann::json::parse(byte_level_json({{"a", "a"}}));
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "a"}}}, {"behavior", "Contiguous"}, {"invert", true}};
  auto tok = Tokenizer::from_json(j.dump());
  EXPECT_EQ(tok.encode("aab"), (std::vector<std::int32_t>{*tok.token_to_id("aa"), 'b'}));
}

TEST(Tokenizer, PreTokenizerAfterByteLevelIsAnError) {
  // Hugging Face runs a step that follows ByteLevel on the byte-level
  // characters (" " is "Ġ" by then): Split " " after ByteLevel splits nothing
  // in "a b". Splitting the raw text instead would silently change the ids.
  auto j = nlohmann::json::parse(byte_level_json({}));
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}},
                          {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}}}}};
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); })
                .find("t.json: $.pre_tokenizer.pretokenizers[1].type: a pre-tokenizer after ByteLevel"),
            std::string::npos);
  // Split before ByteLevel (Llama 3's layout) stays supported.
  std::swap(j["pre_tokenizer"]["pretokenizers"][0], j["pre_tokenizer"]["pretokenizers"][1]);
  auto tok = Tokenizer::from_json(j.dump(), "t.json");
  EXPECT_EQ(tok.encode("a b"), (std::vector<std::int32_t>{'a', 'b'}));
}

TEST(Tokenizer, MalformedJsonNamesThePath) {
  EXPECT_NE(error_of([] { Tokenizer::from_json("{\"model\": ", "t.json"); }).find("t.json: invalid JSON at byte"),
            std::string::npos);
  // Found by fuzzing: a number too large for a double is out_of_range, not a parse_error.
  EXPECT_NE(error_of([] { Tokenizer::from_json(" 77e771", "t.json"); }).find("t.json: invalid JSON"), std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_json("{}", "t.json"); }).find("$: missing required key \"model\""),
            std::string::npos);
  auto j = nlohmann::json::parse(byte_level_json({{"a", "b"}}));
  j["model"]["merges"].push_back(7);
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); }).find("t.json: $.model.merges[1]: expected a merge"),
            std::string::npos);
  j = nlohmann::json::parse(byte_level_json({}));
  j["model"]["merges"] = {"a zz"};
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); }).find("$.model.merges[0]: merge part 'zz' is not in"),
            std::string::npos);
  j = nlohmann::json::parse(byte_level_json({}));
  j["model"]["vocab"]["a"] = -3;
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); }).find("$.model.vocab[\"a\"]: expected a token id"),
            std::string::npos);
  j = nlohmann::json::parse(byte_level_json({}));
  j["normalizer"] = {{"type", "NFKC"}};  // NFC is supported, its siblings are not
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); }).find("$.normalizer.type: normalizer \"NFKC\" is not supported"),
            std::string::npos);
  j = nlohmann::json::parse(byte_level_json({}));
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); })
                .find("t.json: $.pre_tokenizer.pattern: invalid regular expression '(unclosed'"),
            std::string::npos);
  // Found by fuzzing: a huge id would size the id-indexed tables in gigabytes.
  j = nlohmann::json::parse(byte_level_json({}));
  j["model"]["vocab"]["a"] = 209999994;
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); }).find("t.json: $.model.vocab[\"a\"]: expected a token id (integer in [0, 2^24))"),
            std::string::npos);
  j = nlohmann::json::parse(byte_level_json({}));
  j["added_tokens"].push_back({{"id", 209999994}, {"content", "<huge>"}, {"special", true}});
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); })
                .find("t.json: $.added_tokens[1].id: expected a token id (integer in [0, 2^24)), got number 209999994"),
            std::string::npos);
  j = nlohmann::json::parse(byte_level_json({}));
  j["added_tokens"][0]["content"] = 5;
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); }).find("$.added_tokens[0].content: expected a string"),
            std::string::npos);
}

// Qwen2's pre-tokenizer pattern (transformers' Qwen2 conversion, as in Qwen/Qwen2-0.5B's tokenizer.json).
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A Qwen2-structured tokenizer.json over byte_level_json's vocabulary: NFC,
// Split(Qwen2's pattern, Isolated) then ByteLevel without its regex.
nlohmann::json qwen2_json(const std::vector<std::pair<std::string, std::string>>& merges) {
  auto j = nlohmann::json::parse(byte_level_json(merges));
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", kQwen2Pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
  return j;
}

TEST(Normalizer, NfcAsHuggingFace) {
  std::string out;
  nfc("plain ASCII\r\n", out);
  EXPECT_EQ(out, "plain ASCII\r\n");
  nfc("e\xCC\x81 A\xCC\x8A", out);  // e + U+0301, A + U+030A
  EXPECT_EQ(out, "\xC3\xA9 \xC3\x85");
  nfc("a\xCC\x81\xCC\x96", out);  // a + U+0301 (class 230) + U+0316 (220): reordered, then composed
  EXPECT_EQ(out, "\xC3\xA1\xCC\x96");
  nfc("\xE1\x84\x80\xE1\x85\xA1", out);  // Hangul jamo U+1100 U+1161 -> U+AC00
  EXPECT_EQ(out, "\xEA\xB0\x80");
  // Hugging Face's tables are Unicode 9.0's (tokenizers 0.23): U+11935 U+11930 composes to U+11938
  // only from Unicode 13 on, and U+1ABF (Unicode 13, class 220) is a plain starter there, so the
  // U+0301 after it stays apart from the "a".
  nfc("\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0", out);
  EXPECT_EQ(out, "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0");
  nfc("a\xE1\xAA\xBF\xCC\x81", out);
  EXPECT_EQ(out, "a\xE1\xAA\xBF\xCC\x81");
  // Invalid bytes are kept; the text on each side is normalized on its own.
  nfc("e\xCC\x81\xFF" "e\xFF\xCC\x81", out);
  EXPECT_EQ(out, "\xC3\xA9\xFF" "e\xFF\xCC\x81");
}

TEST(Tokenizer, Qwen2StructureNormalizesAndSplits) {
  // "é" is C3 A9, the byte-level characters "Ã" (U+00C3) "©" (U+00A9).
  auto tok = Tokenizer::from_json(qwen2_json({{"\xC3\x83", "\xC2\xA9"}}).dump(), "qwen2.json");
  const std::int32_t e_acute = *tok.token_to_id("\xC3\x83\xC2\xA9");
  EXPECT_EQ(tok.encode("e\xCC\x81"), (std::vector<std::int32_t>{e_acute}));
  EXPECT_EQ(tok.encode("\xC3\xA9"), (std::vector<std::int32_t>{e_acute}));
  EXPECT_EQ(tok.decode(tok.encode("e\xCC\x81<|endoftext|>")), "\xC3\xA9<|endoftext|>");
  // A normalized added token matches the normalized text and decodes to its normalized content, as in
  // Hugging Face tokenizers 0.23.
  auto j = qwen2_json({});
  // (The space keeps the ByteLevel decoder from reading "é" as the byte-level character of byte E9:
  // a token with a character outside that alphabet decodes to its own bytes.)
  j["added_tokens"].push_back({{"id", 1001}, {"content", "ole\xCC\x81 x"}, {"special", false}, {"normalized", true}});
  tok = Tokenizer::from_json(j.dump(), "qwen2.json");
  const auto ids = tok.encode("ol\xC3\xA9 x");
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(tok.decode(ids), "ol\xC3\xA9 x");
  EXPECT_EQ(tok.id_to_token(ids[0]), "ol\xC3\xA9 x");

  PreTokenizer pre;
  pre.add_split(kQwen2Pattern, SplitBehavior::isolated, false);
  pre.add_byte_level(false, false);
  // Hugging Face tokenizers 0.23 splits this text so (checked with its Split pre-tokenizer).
  EXPECT_EQ(split_texts(pre, "DON'T   stop\r\n\r\n  123 \xE4\xB8\xAD\xE6\x96\x87!!\n x'S"),
            (std::vector<std::string>{"DON", "'T", "  ", " stop", "\r\n\r\n", " ", " ", "1", "2", "3",
                                      " \xE4\xB8\xAD\xE6\x96\x87", "!!\n", " x", "'S"}));
}

TEST(Tokenizer, PatternsReadDifferentlyByOnigurumaAreRefused) {
  // Each compiles in PCRE2 but would split differently from Hugging Face's Oniguruma.
  for (const std::string pattern : {"^a", "a$", "\\h+", "(?m:a.b)", "(?s)."}) {
    auto j = qwen2_json({});
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern;
    const std::string e = error_of([&] { Tokenizer::from_json(j.dump(), "qwen2.json"); });
    EXPECT_NE(e.find("qwen2.json: $.pre_tokenizer.pretokenizers[0].pattern: pattern '" + pattern + "': "),
              std::string::npos) << e;
    EXPECT_NE(e.find("is not supported"), std::string::npos) << e;
  }
  // The same characters where they mean the same in both engines are fine.
  for (const std::string pattern : {"[$^]", "\\$", "[^a]", "(?i:a)", "\\Q^\\E"}) {
    auto j = qwen2_json({});
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern;
    EXPECT_NO_THROW(Tokenizer::from_json(j.dump(), "qwen2.json")) << pattern;
  }
}

TEST(Tokenizer, EndOfDocumentNames) {
  EXPECT_EQ(end_of_document_names_text(), "<|endoftext|>, <|end_of_text|>, </s> or <eos>");
  ASSERT_EQ(end_of_document_names().size(), 4u);
  auto tok = Tokenizer::from_json(byte_level_json({}));
  EXPECT_EQ(tok.eod_id(), 1000);
}

TEST(BpeTrainer, DeterministicAndLoadable) {
  BpeTrainerOptions options;
  options.vocab_size = 270;
  options.special_tokens = {"<|endoftext|>"};
  options.min_frequency = 1;
  std::string text;
  for (int i = 0; i < 50; ++i) text += "the cat sat on the mat; the hat is flat. <|endoftext|>\n";
  BpeTrainer a(options), b(options);
  a.feed(text);
  b.feed(text);
  const TrainedBpe ta = a.train(), tb = b.train();
  EXPECT_EQ(tokenizer_json(ta), tokenizer_json(tb));
  EXPECT_EQ(ta.vocab.size(), 270u);
  EXPECT_EQ(ta.vocab[0], "<|endoftext|>");
  auto tok = Tokenizer::from_json(tokenizer_json(ta));
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_LT(tok.encode(text).size(), text.size() / 2);
  EXPECT_EQ(tok.encode("<|endoftext|>"), (std::vector<std::int32_t>{0}));
  options.vocab_size = 100;
  EXPECT_NE(error_of([&] { BpeTrainer t(options); }).find("smaller than the 1 special token(s) + 256"), std::string::npos);
}

}  // namespace
}  // namespace trident::data
