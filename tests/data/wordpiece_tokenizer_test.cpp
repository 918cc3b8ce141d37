// WordPiece (BERT) tokenizers: BertNormalizer, BertPreTokenizer, the WordPiece
// model and decoder, the BERT template with pairs and type ids, truncation,
// vocab.txt and the trainer. Expected values follow Hugging Face tokenizers'
// definitions (docs/data.md); tests/interop/wordpiece_interop.py checks the
// same against the library itself.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "trident/core/error.h"
#include "trident/data/tokenizer/normalizer.h"
#include "trident/data/tokenizer/tokenizer.h"
#include "trident/data/tokenizer/wordpiece_trainer.h"

namespace trident::data {
namespace {

using Ids = std::vector<std::int32_t>;
using testing::error_of;
using json = nlohmann::json;

std::string bert(std::string_view text, BertNormalizerOptions o = {}) {
  std::string out;
  bert_normalize(text, o, out);
  return out;
}

TEST(BertNormalizer, AccentsAreStrippedWithLowercase) {
  EXPECT_EQ(bert("Café Naïve ÅNGSTRÖM"), "cafe naive angstrom");
  EXPECT_EQ(bert("e\xCC\x81"), "e");  // e + combining acute
  BertNormalizerOptions keep;
  keep.strip_accents = false;
  EXPECT_EQ(bert("Café", keep), "café");
  BertNormalizerOptions cased;
  cased.lowercase = false;
  cased.strip_accents = false;
  EXPECT_EQ(bert("Café", cased), "Café");
  EXPECT_EQ(bert("\xC4\xB0", keep), "i\xCC\x87");  // U+0130 lowercases to i + U+0307
  EXPECT_EQ(bert("\xCE\xA3\xCE\xA3", keep), "\xCF\x83\xCF\x83");  // no final sigma
}

TEST(BertNormalizer, ChineseCharactersGetSpaces) {
  EXPECT_EQ(bert("ab東京c"), "ab 東  京 c");
  BertNormalizerOptions off;
  off.handle_chinese_chars = false;
  EXPECT_EQ(bert("ab東京c", off), "ab東京c");
  off.strip_accents = false;
  EXPECT_EQ(bert("한국", off), "한국");  // Hangul is not in BERT's CJK blocks
  EXPECT_EQ(bert("한"), "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB");  // stripping accents leaves it decomposed (NFD)
}

TEST(BertNormalizer, ControlCharactersAndWhitespace) {
  EXPECT_EQ(bert(std::string("a\tb\nc\rd\x00" "e\x07" "f", 11)), "a b c def");
  EXPECT_EQ(bert("x\xEF\xBF\xBDy\xE2\x80\x8Bz"), "xyz");  // U+FFFD and U+200B (Cf) dropped
  EXPECT_EQ(bert("a\xC2\xA0" "b\xE3\x80\x80" "c"), "a b c");    // NBSP, ideographic space
  BertNormalizerOptions raw;
  raw.clean_text = false;
  raw.lowercase = false;
  raw.strip_accents = false;
  EXPECT_EQ(bert("a\tb\x07", raw), "a\tb\x07");
  EXPECT_EQ(bert("\xCD\xB8"), "\xCD\xB8");  // unassigned U+0378 is kept
}

// A small BERT tokenizer.json.
json bert_json() {
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "hello",
                                     "world", "!", ",", "a", "##b", "東", "cafe", "##s"};
  return json::parse(Tokenizer::wordpiece_json(tokens, true));
}

TEST(WordPiece, GreedyLongestMatchAndUnknownWords) {
  const Tokenizer tok = Tokenizer::from_json(bert_json().dump());
  EXPECT_EQ(tok.encode("unaffable", false), (Ids{5, 6, 7}));
  EXPECT_EQ(tok.encode("Hello, WORLD!", false), (Ids{8, 11, 9, 10}));
  EXPECT_EQ(tok.encode("Cafés 東", false), (Ids{15, 16, 14}));
  EXPECT_EQ(tok.encode("unx hello", false), (Ids{1, 8}));  // no cutting of "unx": the whole word is [UNK]
  EXPECT_EQ(tok.encode("hello", true), (Ids{2, 8, 3}));
  EXPECT_EQ(tok.encode("[CLS]hello[MASK]", false), (Ids{2, 8, 4}));
  EXPECT_EQ(tok.encode("[cls]", false), (Ids{1, 1, 1}));  // special tokens are not normalized: "[", "cls", "]"
}

TEST(WordPiece, OverLongWordIsOneUnknown) {
  json j = bert_json();
  j["model"]["max_input_chars_per_word"] = 4;
  const Tokenizer tok = Tokenizer::from_json(j.dump());
  EXPECT_EQ(tok.encode("abbb abbbb", false), (Ids{12, 13, 13, 13, 1}));
  EXPECT_EQ(tok.encode("東東東東東", false), (Ids{14, 14, 14, 14, 14}));  // each ideograph is a word
}

TEST(WordPiece, DecoderJoinsPiecesAndCleansUp) {
  const Tokenizer tok = Tokenizer::from_json(bert_json().dump());
  EXPECT_EQ(tok.decode(Ids{2, 5, 6, 7, 8, 11, 9, 10, 3}), "[CLS] unaffable hello, world! [SEP]");
  EXPECT_EQ(tok.decode(Ids{2, 5, 6, 7, 3}, true), "unaffable");
}

TEST(WordPiece, PairTemplateWithTypeIds) {
  const Tokenizer tok = Tokenizer::from_json(bert_json().dump());
  std::vector<std::uint32_t> types;
  EXPECT_EQ(tok.encode_pair("hello", "world !", true, &types), (Ids{2, 8, 3, 9, 10, 3}));
  EXPECT_EQ(types, (std::vector<std::uint32_t>{0, 0, 0, 1, 1, 1}));
  types.clear();
  EXPECT_EQ(tok.encode_pair("hello", "world", false, &types), (Ids{8, 9}));
  EXPECT_EQ(types, (std::vector<std::uint32_t>{0, 1}));
  // BertProcessing gives the same.
  json j = bert_json();
  j["post_processor"] = {{"type", "BertProcessing"}, {"sep", {"[SEP]", 3}}, {"cls", {"[CLS]", 2}}};
  types.clear();
  EXPECT_EQ(Tokenizer::from_json(j.dump()).encode_pair("hello", "world !", true, &types), (Ids{2, 8, 3, 9, 10, 3}));
  EXPECT_EQ(types, (std::vector<std::uint32_t>{0, 0, 0, 1, 1, 1}));
}

TEST(WordPiece, Truncation) {
  json j = bert_json();
  j["truncation"] = {{"direction", "Right"}, {"max_length", 6}, {"strategy", "LongestFirst"}, {"stride", 0}};
  const Tokenizer tok = Tokenizer::from_json(j.dump());
  // 6 - 3 template tokens = 3: the longer sequence is cut first.
  EXPECT_EQ(tok.encode_pair("hello hello", "world world world world"), (Ids{2, 8, 3, 9, 9, 3}));
  Encoder enc(tok);
  EXPECT_EQ(enc.encode("hello hello hello hello hello"), (Ids{2, 8, 8, 8, 8, 8, 3}));  // not truncated unless asked
  enc.set_truncate(true);
  EXPECT_EQ(enc.encode("hello hello hello hello hello"), (Ids{2, 8, 8, 8, 8, 3}));
  j["truncation"]["strategy"] = "Sideways";
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); }).find("t.json: $.truncation.strategy: expected"),
            std::string::npos);
}

TEST(WordPiece, Errors) {
  json j = bert_json();
  j["model"]["unk_token"] = "[NOPE]";
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); }).find("t.json: $.model.unk_token: expected a token"),
            std::string::npos);
  j = bert_json();
  j["model"]["type"] = "Unigram";
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); }).find("model type \"Unigram\""),
            std::string::npos);
}

TEST(WordPiece, VocabTxt) {
  testing::TempDir dir("trident-wordpiece-vocab");
  {
    std::ofstream f(dir / "vocab.txt", std::ios::binary);
    f << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n##s\nHello\n";
  }
  const Tokenizer lower = Tokenizer::load(dir.path() / "vocab.txt");
  EXPECT_EQ(lower.encode("Hello worlds"), (Ids{2, 5, 6, 7, 3}));
  const Tokenizer cased = Tokenizer::load(dir.path() / "vocab.txt", false);
  EXPECT_EQ(cased.encode("Hello worlds"), (Ids{2, 8, 6, 7, 3}));
  EXPECT_TRUE(lower.is_special(4));
  EXPECT_EQ(lower.vocab_size(), 9);
  {
    std::ofstream f(dir / "tokenizer_config.json");
    f << R"({"do_lower_case": false})";
  }
  EXPECT_EQ(Tokenizer::load(dir.path()).encode("Hello", false), (Ids{8}));  // the directory, config beside it
  {
    std::ofstream f(dir / "bad.txt", std::ios::binary);
    f << "a\nb\n";
  }
  EXPECT_NE(error_of([&] { Tokenizer::load(dir.path() / "bad.txt"); }).find("bad.txt: the vocabulary has no [UNK]"),
            std::string::npos);
}

TEST(WordPieceTrainer, TrainsALoadableDeterministicVocabulary) {
  WordPieceTrainerOptions o;
  o.vocab_size = 60;
  o.min_frequency = 1;
  WordPieceTrainer a(o), b(o);
  const std::string text = "The runner runs; runners RUN. Running naïve 東京!\nthe end the end";
  a.feed(text);
  b.feed(text);
  const auto tokens = a.train();
  EXPECT_EQ(tokens, b.train());
  ASSERT_GE(tokens.size(), 5u);
  EXPECT_EQ(std::vector<std::string>(tokens.begin(), tokens.begin() + 5),
            (std::vector<std::string>{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}));
  const Tokenizer tok = Tokenizer::from_json(Tokenizer::wordpiece_json(tokens, true));
  const Ids ids = tok.encode("the runners run", false);
  for (std::int32_t id : ids) EXPECT_NE(id, 1) << "no word of the training text is unknown";
  EXPECT_EQ(tok.decode(ids), "the runners run");
}

}  // namespace
}  // namespace trident::data
