// SentencePiece-style BPE tokenizer.json files (Llama 2, Mistral, TinyLlama):
// byte fallback, fuse_unk, the legacy Prepend+Replace normalizer and the newer
// Metaspace pre-tokenizer, and their decoders. Expected ids and texts are what
// Hugging Face tokenizers 0.23.3 gives for the same files (built in Python
// with the same vocabulary and merges).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "trident/core/error.h"
#include "trident/data/tokenizer/tokenizer.h"

namespace trident::data {
namespace {

using Ids = std::vector<std::int32_t>;
using testing::error_of;
using json = nlohmann::json;

// <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then the pieces below from 259.
json spm_json(bool byte_fallback = true, bool fuse_unk = true) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  int next = 259;
  for (const char* t : {"▁",  "a",   "b",  "c",   "h",      "e",  "l",  "o",    "w",  "r",      "d",
                        "▁h", "▁he", "ll", "llo", "▁hello", "▁w", "or", "▁wor", "ld", "▁world", "\n"}) {
    vocab[t] = next++;
  }
  json merges = json::array();
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{{"▁", "h"},
                                                                             {"▁h", "e"},
                                                                             {"l", "l"},
                                                                             {"ll", "o"},
                                                                             {"▁he", "llo"},
                                                                             {"▁", "w"},
                                                                             {"o", "r"},
                                                                             {"▁w", "or"},
                                                                             {"l", "d"},
                                                                             {"▁wor", "ld"}}) {
    merges.push_back(json::array({a, b}));
  }
  json added = json::array();
  for (int id = 0; id < 3; ++id) {
    added.push_back({{"id", id},
                     {"content", id == 0   ? "<unk>"
                                 : id == 1 ? "<s>"
                                           : "</s>"},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  return {
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "▁"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", json::array()},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"fuse_unk", fuse_unk},
        {"byte_fallback", byte_fallback},
        {"vocab", vocab},
        {"merges", merges}}},
  };
}

// The newer form: no normalizer, a Metaspace pre-tokenizer and decoder.
json metaspace_json(const std::string& scheme, bool split) {
  json j = spm_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", scheme}, {"split", split}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", scheme}, {"split", split}};
  return j;
}

TEST(SpmTokenizer, LegacyNormalizerEncodes) {
  const auto tok = Tokenizer::from_json(spm_json().dump());
  EXPECT_EQ(tok.encode("hello world"), (Ids{1, 274, 279}));
  EXPECT_EQ(tok.encode(" hello"), (Ids{1, 259, 274}));  // Prepend is unconditional: "▁▁hello"
  EXPECT_EQ(tok.encode("  hello"), (Ids{1, 259, 259, 274}));
  EXPECT_EQ(tok.encode("hello  world"), (Ids{1, 274, 259, 279}));
  EXPECT_EQ(tok.encode("hello\nworld"), (Ids{1, 274, 280, 267, 276, 278}));
  EXPECT_EQ(tok.encode("hello\n world"), (Ids{1, 274, 280, 279}));
  // Each span between added tokens is normalized on its own: "▁world" after </s>.
  EXPECT_EQ(tok.encode("hello</s>world"), (Ids{1, 274, 2, 279}));
  EXPECT_EQ(tok.encode("hello</s> world"), (Ids{1, 274, 2, 259, 279}));
  EXPECT_EQ(tok.encode(""), (Ids{1}));
  EXPECT_EQ(tok.encode("hello", false), (Ids{274}));
}

TEST(SpmTokenizer, ByteFallbackAndUnknowns) {
  auto tok = Tokenizer::from_json(spm_json().dump());
  EXPECT_EQ(tok.encode("héllo"), (Ids{1, 270, 3 + 0xC3, 3 + 0xA9, 273}));
  EXPECT_EQ(tok.encode("中"), (Ids{1, 259, 3 + 0xE4, 3 + 0xB8, 3 + 0xAD}));
  EXPECT_EQ(tok.encode("aé中"), (Ids{1, 259, 260, 198, 172, 231, 187, 176}));
  // Without byte fallback: unknown characters become <unk>, a run of them one <unk> with fuse_unk
  // ('x' is unknown too, so "中文x中" is a single run).
  tok = Tokenizer::from_json(spm_json(false, true).dump());
  EXPECT_EQ(tok.encode("héllo"), (Ids{1, 270, 0, 273}));
  EXPECT_EQ(tok.encode("中文x中"), (Ids{1, 259, 0}));
  tok = Tokenizer::from_json(spm_json(false, false).dump());
  EXPECT_EQ(tok.encode("中文x中"), (Ids{1, 259, 0, 0, 0, 0}));
}

TEST(SpmTokenizer, LegacyDecoderRoundTrips) {
  const auto tok = Tokenizer::from_json(spm_json().dump());
  for (const char* text : {"hello world", "  hello", "hello\n world", "héllo 中文 wörld", "a\tb\r\nc  "}) {
    EXPECT_EQ(tok.decode(tok.encode(text), true), text);
  }
  EXPECT_EQ(tok.decode(Ids{1, 274, 279}), "<s> hello world");  // Strip removes only the first space
  EXPECT_EQ(tok.decode(Ids{1, 274, 2, 259, 279}), "<s> hello</s>  world");
  EXPECT_EQ(tok.decode(Ids{1, 274, 2, 259, 279}, true), "hello  world");
  // Invalid UTF-8 from byte tokens: one U+FFFD per byte of the run, as Hugging Face's ByteFallback.
  EXPECT_EQ(tok.decode(Ids{3 + 0xE4, 3 + 0xB8, 274, 3 + 0xFF, 3 + 0x41}), "\uFFFD\uFFFD hello\uFFFD\uFFFD");
  EXPECT_EQ(tok.decode(Ids{3 + 0xE4, 3 + 0xB8, 3 + 0xAD}), "中");
}

// Streaming (trident generate): each id's text appears once it is final, and the pieces join into the
// text of the whole sequence after the prompt's. Decoding each id alone would drop every leading space
// (Strip removes a first token's) and turn the bytes of 中 into U+FFFDs.
TEST(SpmTokenizer, DecodeStreamJoinsIntoTheWholeText) {
  const auto tok = Tokenizer::from_json(spm_json().dump());
  const Ids all = tok.encode("hello world héllo 中 world", false);
  const Ids prompt(all.begin(), all.begin() + 1);
  DecodeStream stream(tok, prompt);
  std::vector<std::string> pieces;
  std::string joined, one_by_one;
  for (std::size_t i = 1; i < all.size(); ++i) {
    pieces.push_back(stream.step(all[i]));
    joined += pieces.back();
    one_by_one += tok.decode(Ids{all[i]});
  }
  joined += stream.finish();
  EXPECT_EQ(tok.decode(prompt) + joined, tok.decode(all));
  EXPECT_EQ(joined, " world héllo 中 world");
  EXPECT_NE(one_by_one, joined);
  // The bytes of 中 (the ids after "▁") show nothing until the last completes the character.
  const auto han = std::find(all.begin(), all.end(), 3 + 0xE4) - all.begin();
  EXPECT_EQ(pieces[static_cast<std::size_t>(han) - 1], "");
  EXPECT_EQ(pieces[static_cast<std::size_t>(han)], "");
  EXPECT_EQ(pieces[static_cast<std::size_t>(han) + 1], "中");
  // A character never completed is shown by finish(), as the decoder gives it.
  DecodeStream cut(tok, {});
  EXPECT_EQ(cut.step(274), "hello");
  EXPECT_EQ(cut.step(3 + 0xE4), "");
  EXPECT_EQ(cut.finish(), "\uFFFD");
}

TEST(SpmTokenizer, MetaspacePrependSchemes) {
  auto tok = Tokenizer::from_json(metaspace_json("first", false).dump());
  EXPECT_EQ(tok.encode("hello world"), (Ids{1, 274, 279}));
  EXPECT_EQ(tok.encode(" hello"), (Ids{1, 274}));  // a leading space is the ▁ (no second one)
  EXPECT_EQ(tok.encode("  hello"), (Ids{1, 259, 274}));
  EXPECT_EQ(tok.encode("hello\n world"), (Ids{1, 274, 280, 279}));
  // "first": only the span at the start of the input gets the ▁.
  EXPECT_EQ(tok.encode("hello</s>world"), (Ids{1, 274, 2, 267, 276, 278}));
  EXPECT_EQ(tok.encode("hello </s> world"), (Ids{1, 274, 259, 2, 279}));
  for (bool split : {false, true}) {
    tok = Tokenizer::from_json(metaspace_json("always", split).dump());
    EXPECT_EQ(tok.encode("hello</s>world"), (Ids{1, 274, 2, 279}));
    EXPECT_EQ(tok.encode("  hello"), (Ids{1, 259, 274}));
  }
  tok = Tokenizer::from_json(metaspace_json("never", false).dump());
  EXPECT_EQ(tok.encode("hello world"), (Ids{1, 263, 264, 273, 279}));
  EXPECT_EQ(tok.encode("hello</s> world"), (Ids{1, 263, 264, 273, 2, 279}));
  EXPECT_EQ(tok.encode("aé中"), (Ids{1, 260, 198, 172, 231, 187, 176}));
}

TEST(SpmTokenizer, MetaspaceDecoder) {
  auto tok = Tokenizer::from_json(metaspace_json("first", true).dump());
  // The first token's ▁ is dropped, not the first token after <s>, unless <s> is skipped.
  EXPECT_EQ(tok.decode(Ids{1, 274, 279}), "<s> hello world");
  EXPECT_EQ(tok.decode(Ids{1, 274, 279}, true), "hello world");
  EXPECT_EQ(tok.decode(Ids{1, 259, 274}, true), " hello");  // "  hello" encoded: ▁, ▁hello
  EXPECT_EQ(tok.decode(Ids{259, 259}), " ");                // every ▁ of the first token is dropped
  // No ByteFallback step: byte tokens stay as they are.
  EXPECT_EQ(tok.decode(Ids{260, 198}), "a<0xC3>");
  tok = Tokenizer::from_json(metaspace_json("never", false).dump());
  EXPECT_EQ(tok.decode(Ids{1, 263, 264, 273, 279}), "<s>hello world");
  EXPECT_EQ(tok.decode(Ids{259, 274}), "  hello");
}

TEST(SpmTokenizer, NormalizedAddedTokensMatchTheNormalizedText) {
  // A normalized=true added token matches its normalized content ("▁hello▁there"),
  // found in each normalized span.
  json j = spm_json();
  j["added_tokens"].push_back({{"id", 9},
                               {"content", "hello there"},
                               {"single_word", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"normalized", true},
                               {"special", false}});
  const auto tok = Tokenizer::from_json(j.dump());
  const std::int32_t t = *tok.token_to_id("hello there");
  EXPECT_EQ(t, 281);  // the next id after the 281 vocabulary tokens
  EXPECT_EQ(tok.encode("hello there world"), (Ids{1, t, 279}));
  EXPECT_EQ(tok.encode("ahello there"), (Ids{1, 259, 260, 263, 264, 273, 259, 3 + 't', 263, 264, 268, 264}));
}

TEST(SpmTokenizer, UnsupportedPartsNameTheirPath) {
  json j = spm_json();
  j["model"]["unk_token"] = "<nope>";
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); })
                .find("$.model.unk_token: expected a token of the vocabulary, got string \"<nope>\""),
            std::string::npos);
  j = spm_json();
  j["normalizer"]["normalizers"].push_back({{"type", "NFKC"}});
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); }).find("$.normalizer.normalizers[2].type"),
            std::string::npos);
  j = spm_json();
  j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); }).find("$.normalizer.normalizers[1].pattern.Regex"),
            std::string::npos);
  j = spm_json();
  j["decoder"]["decoders"].push_back({{"type", "CTC"}});
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); }).find("$.decoder.decoders[4].type"), std::string::npos);
  j = spm_json();
  j["decoder"]["decoders"].push_back({{"type", "ByteLevel"}});
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); }).find("ByteLevel decoder after other decoders"),
            std::string::npos);
  // "first" needs offsets in the original text; with a normalizer it is refused.
  j = metaspace_json("first", false);
  j["normalizer"] = spm_json()["normalizer"];
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); }).find("$.pre_tokenizer"), std::string::npos);
  j = metaspace_json("first", false);
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Isolated"}}, j["pre_tokenizer"]}}};
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); }).find("$.pre_tokenizer.pretokenizers[1].type"),
            std::string::npos);
  j = metaspace_json("sometimes", false);
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); }).find("$.pre_tokenizer.prepend_scheme"),
            std::string::npos);
  // Hugging Face refuses add_prefix_space=false unless prepend_scheme is "never".
  j = metaspace_json("first", false);
  j["pre_tokenizer"].erase("prepend_scheme");
  j["pre_tokenizer"]["add_prefix_space"] = false;
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); }).find("$.pre_tokenizer.add_prefix_space"),
            std::string::npos);
  j["pre_tokenizer"]["prepend_scheme"] = "never";
  EXPECT_EQ(Tokenizer::from_json(j.dump()).encode("hello world"), (Ids{1, 263, 264, 273, 279}));
  j = spm_json();
  j["decoder"]["decoders"][3]["content"] = "ab";
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); }).find("$.decoder.decoders[3].content"), std::string::npos);
}

}  // namespace
}  // namespace trident::data
