#include "trident/data/dataset/preprocess.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <optional>

#include "test_util.h"
#include "trident/data/dataset/dataset_card.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/parquet_reader.h"

namespace trident::data {
namespace {

using testing::error_of;
using testing::TempDir;
using ::testing::HasSubstr;

Tokenizer small_tokenizer() {
  return testing::small_bpe(
      "In the beginning God created the heaven and the earth. And the earth was without form, and void.\n");
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(Preprocess, NoDocumentsIsAnErrorThatWritesNothing) {
  // An empty JSONL (or one whose every document is empty) would give a 0-document dataset that
  // training then refuses, blaming data.split: the error comes here, naming the input.
  TempDir dir("trident-pre-empty");
  const Tokenizer tok = small_tokenizer();
  write(dir / "empty.jsonl", "");
  write(dir / "blank.jsonl", "{\"text\": \"\"}\n");
  for (const char* name : {"empty.jsonl", "blank.jsonl"}) {
    PreprocessOptions o;
    o.inputs = {dir / name};
    o.output_prefix = dir / "out";
    EXPECT_THAT(error_of([&] { preprocess(tok, o); }),
                HasSubstr(fmt::format("'{}': no documents to write", dir / name)));
    EXPECT_FALSE(std::filesystem::exists(dir / "out.bin"));
    EXPECT_FALSE(std::filesystem::exists(dir / "out.idx"));
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
      EXPECT_EQ(entry.path().string().find("out.bin.tmp"), std::string::npos) << entry.path();
    }
  }
}

// Issue 48: without overwrite an existing dataset is refused, a stop request (a signal's flag) writes
// nothing and leaves the existing dataset whole, and the temporaries a killed run left are removed.
TEST(Preprocess, RefusesToOverwriteStopsCleanlyAndRemovesStaleTemporaries) {
  TempDir dir("trident-pre-stop");
  const Tokenizer tok = small_tokenizer();
  write(dir / "in.txt", "one line\nand another\n");
  PreprocessOptions o;
  o.inputs = {dir / "in.txt"};
  o.output_prefix = dir / "out";
  preprocess(tok, o);
  const std::string bin = read(dir / "out.bin"), idx = read(dir / "out.idx");
  o.overwrite = false;
  EXPECT_EQ(error_of([&] { preprocess(tok, o); }),
            fmt::format("--output-prefix '{}': {}.bin already exists; give --overwrite to replace the dataset, or "
                        "another prefix",
                        o.output_prefix, o.output_prefix));
  std::atomic<bool> stop{true};
  o.overwrite = true;
  o.stop = &stop;
  EXPECT_THAT(error_of([&] { preprocess(tok, o); }), HasSubstr("interrupted: " + o.output_prefix + ".bin/.idx not written"));
  EXPECT_EQ(read(dir / "out.bin"), bin);
  EXPECT_EQ(read(dir / "out.idx"), idx);
  // A temporary of a process that is gone (pid 2^22 + 1 is above Linux's largest) goes; this process's stays.
  write(dir / "out.bin.tmp.4194305.0", "stale");
  write(dir / fmt::format("out.idx.tmp.{}.7", ::getpid()), "mine");
  o.stop = nullptr;
  std::vector<std::filesystem::path> stale;
  preprocess(tok, o, {}, &stale);
  EXPECT_EQ(stale, (std::vector<std::filesystem::path>{dir / "out.bin.tmp.4194305.0"}));
  EXPECT_FALSE(std::filesystem::exists(dir / "out.bin.tmp.4194305.0"));
  EXPECT_TRUE(std::filesystem::exists(dir / fmt::format("out.idx.tmp.{}.7", ::getpid())));
}

TEST(Preprocess, MissingOutputDirectoryIsMadeOrNamed) {
  TempDir dir("trident-pre-outdir");
  const Tokenizer tok = small_tokenizer();
  write(dir / "in.txt", "one line\n");
  PreprocessOptions o;
  o.inputs = {dir / "in.txt"};
  o.output_prefix = (dir.path() / "a" / "b" / "out").string();
  preprocess(tok, o);
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "a" / "b" / "out.idx"));
  // A file where the directory should be: the error names that path, not a temporary file.
  write(dir / "f", "");
  o.output_prefix = (dir.path() / "f" / "out").string();
  EXPECT_THAT(error_of([&] { preprocess(tok, o); }),
              HasSubstr(fmt::format("--output-prefix '{}': cannot create the directory '{}'", o.output_prefix,
                                    dir / "f")));
}

TEST(Preprocess, TextLinesWithEodInOrderForAnyWorkerCount) {
  TempDir dir("trident-pre-text");
  const Tokenizer tok = small_tokenizer();
  std::string text;
  std::vector<std::string> lines;
  for (int i = 0; i < 3000; ++i) {
    lines.push_back(i % 7 == 3 ? "" : "line " + std::to_string(i) + " and the earth \xff\xfe was");
    text += lines.back() + (i % 5 == 0 ? "\r\n" : "\n");
  }
  write(dir / "in.txt", text);
  PreprocessOptions o;
  o.inputs = {dir / "in.txt"};
  o.append_eod = true;
  for (int workers : {1, 3}) {
    o.workers = workers;
    o.output_prefix = dir / ("out" + std::to_string(workers));
    const auto s = preprocess(tok, o);
    EXPECT_EQ(s.empty_documents, 3000u / 7 + 1);
    EXPECT_EQ(s.documents + s.empty_documents, 3000u);
    EXPECT_EQ(s.dtype, TokenDType::u16);
  }
  EXPECT_EQ(read(dir / "out1.bin"), read(dir / "out3.bin"));
  EXPECT_EQ(read(dir / "out1.idx"), read(dir / "out3.idx"));
  auto ds = IndexedDataset::open(dir / "out3");
  std::size_t k = 0;
  for (const auto& line : lines) {
    if (line.empty()) continue;
    auto want = tok.encode(line);
    want.push_back(0);
    ASSERT_EQ(ds->sequence(k), want) << line;
    ++k;
  }
  EXPECT_EQ(k, ds->size());
}

// The dataset's card records the framing, the tokenizer and the counts; the fingerprint tells tokenizers of one
// size apart and is the same for the same vocabulary read from another file.
TEST(Preprocess, TheCardRecordsTheFramingAndTheTokenizer) {
  TempDir dir("trident-pre-card");
  const Tokenizer tok = small_tokenizer();
  write(dir / "in.txt", "the earth was\nwithout form\n");
  PreprocessOptions o;
  o.inputs = {dir / "in.txt"};
  o.output_prefix = dir / "out";
  o.append_eod = true;
  o.tokenizer_source = "tok.json";
  const auto s = preprocess(tok, o);
  const std::optional<DatasetCard> card = read_dataset_card(o.output_prefix);
  ASSERT_TRUE(card.has_value());
  EXPECT_FALSE(card->encoder);
  EXPECT_TRUE(card->append_eod);
  EXPECT_EQ(card->tokenizer, "tok.json");
  EXPECT_EQ(card->vocab_size, tok.vocab_size());
  EXPECT_EQ(card->documents, s.documents);
  EXPECT_EQ(card->tokens, s.tokens);
  EXPECT_EQ(card->tokenizer_fingerprint, tokenizer_fingerprint(tok));
  EXPECT_THAT(card->tokenizer_fingerprint, ::testing::MatchesRegex("[0-9a-f]{16}"));
  EXPECT_EQ(tokenizer_fingerprint(small_tokenizer()), card->tokenizer_fingerprint);
  // Tokenizers of the same size but other tokens: other fingerprints.
  std::string genesis, chaucer;
  for (int i = 0; i < 40; ++i) {
    genesis += "In the beginning God created the heaven and the earth " + std::to_string(i) + ". ";
    chaucer += "Whan that Aprille with his shoures soote, the droghte of March " + std::to_string(i) + ". ";
  }
  const Tokenizer one = testing::small_bpe(genesis), other = testing::small_bpe(chaucer);
  ASSERT_EQ(one.vocab_size(), other.vocab_size());
  EXPECT_NE(tokenizer_fingerprint(one), tokenizer_fingerprint(other));
  EXPECT_FALSE(read_dataset_card(dir / "absent").has_value());
  write(dataset_card_path(dir / "bad"), "{\"format\": \"trident-dataset-card-1\", \"framing\": 3}");
  EXPECT_THAT(error_of([&] { read_dataset_card(dir / "bad"); }),
              HasSubstr("bad.card.json': key 'framing' is 3 (expected a string)"));
}

TEST(Preprocess, JsonlErrorsNameFileAndLine) {
  TempDir dir("trident-pre-jsonl");
  const Tokenizer tok = small_tokenizer();
  write(dir / "good.jsonl", "{\"text\": \"the earth\"}\n\n{\"text\": \"God\", \"id\": 3}\n");
  write(dir / "notjson.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"\n{\"text\": \"c\"}\n");
  write(dir / "nokey.jsonl", "{\"text\": \"a\"}\n{\"body\": \"b\"}\n");
  write(dir / "notstring.jsonl", "{\"text\": 5}\n");
  PreprocessOptions o;
  o.output_prefix = dir / "out";
  o.inputs = {dir / "good.jsonl", dir / "notjson.jsonl"};
  EXPECT_THAT(error_of([&] { preprocess(tok, o); }), HasSubstr("notjson.jsonl:2: not a JSON line"));
  EXPECT_FALSE(std::filesystem::exists(dir / "out.idx"));
  o.inputs = {dir / "nokey.jsonl"};
  EXPECT_THAT(error_of([&] { preprocess(tok, o); }), HasSubstr("nokey.jsonl:2: the JSON object has no key \"text\""));
  o.inputs = {dir / "notstring.jsonl"};
  EXPECT_THAT(error_of([&] { preprocess(tok, o); }), HasSubstr("notstring.jsonl:1: \"text\" is number 5"));
  o.inputs = {dir / "good.jsonl", dir / "notjson.jsonl", dir / "nokey.jsonl"};
  o.skip_bad_lines = true;
  const auto s = preprocess(tok, o);
  EXPECT_EQ(s.bad_lines, 2u);
  EXPECT_EQ(s.documents, 5u);  // the earth, God | a, c | a (blank lines are not documents)
  auto ds = IndexedDataset::open(dir / "out");
  EXPECT_EQ(ds->sequence(0), tok.encode("the earth"));
  EXPECT_EQ(ds->sequence(1), tok.encode("God"));
  o.json_key = "body";
  o.inputs = {dir / "nokey.jsonl"};
  EXPECT_EQ(preprocess(tok, o).documents, 1u);
}

TEST(Preprocess, WholeFilesAsDocuments) {
  TempDir dir("trident-pre-files");
  const Tokenizer tok = small_tokenizer();
  write(dir / "a.txt", "first line\nsecond line\n");
  write(dir / "b.txt", "another\n\nfile");
  PreprocessOptions o;
  o.inputs = {dir / "a.txt", dir / "b.txt"};
  o.format = InputFormat::text_file;
  o.output_prefix = dir / "out";
  EXPECT_EQ(preprocess(tok, o).documents, 2u);
  auto ds = IndexedDataset::open(dir / "out");
  EXPECT_EQ(ds->sequence(1), tok.encode("another\n\nfile"));
  o.inputs = {dir / "missing.txt"};
  EXPECT_THAT(error_of([&] { preprocess(tok, o); }), HasSubstr("missing.txt' does not exist"));
}

TEST(Preprocess, ParquetInputIsDetectedAndABadFileNamed) {
  // Reading real Parquet files is tested against pyarrow (tests/interop/parquet_interop.py); here,
  // without pyarrow: the extension picks the format, and a file that is not Parquet fails before any
  // work, naming the file, with or without Parquet support in this build.
  EXPECT_EQ(detect_input_format("corpus/part-0001.parquet"), InputFormat::parquet);
  EXPECT_EQ(detect_input_format("corpus/part.jsonl"), InputFormat::jsonl);
  TempDir dir("trident-pre-parquet");
  const Tokenizer tok = small_tokenizer();
  write(dir / "a.txt", "first line\n");
  write(dir / "bad.parquet", "PAR1 this is not a Parquet file");
  PreprocessOptions o;
  o.inputs = {dir / "a.txt", dir / "bad.parquet"};
  o.output_prefix = dir / "out";
  const std::string error = error_of([&] { preprocess(tok, o); });
  EXPECT_THAT(error, HasSubstr("bad.parquet"));
  if (parquet_supported()) {
    EXPECT_THAT(error, HasSubstr("is not a readable Parquet file"));
  } else {
    EXPECT_THAT(error, HasSubstr("built without Parquet support"));
    EXPECT_THAT(error, HasSubstr("scripts/python_env.sh"));
    EXPECT_THAT(error, HasSubstr("iter_batches(columns=[sys.argv[2]])"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "out.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir / "out.idx"));
}

// tests/data/fixtures/docs.parquet (its README says how it was written): rows of `text` and `big`.
const std::vector<std::optional<std::string>> kFixtureRows = {
    "In the beginning God created the heaven and the earth.", "\u00fcn\u00efc\u00f6d\u00e9 \u4e2d\u6587\u5b57\u7b26 \U0001F600\U0001F44D\U0001F3FD",
    std::nullopt, "", "two\nlines\r\n", "last"};

TEST(Preprocess, ParquetColumnsReadRowByRowLikeJsonl) {
  const std::filesystem::path fixture = TRIDENT_TEST_FIXTURES "/docs.parquet";
  if (!parquet_supported()) {
    EXPECT_THAT(error_of([&] { DocumentReader r({fixture}, std::nullopt); }), HasSubstr("built without Parquet support"));
    GTEST_SKIP() << "this build reads no Parquet (pyarrow absent when configured)";
  }
  for (const char* column : {"text", "big"}) {  // string and large_string
    DocumentReader reader({fixture}, std::nullopt, column);
    std::vector<std::pair<std::uint64_t, std::string>> got;
    RawDocument doc;
    while (reader.next(doc)) got.emplace_back(doc.line, extract_document_text(doc, InputFormat::parquet, column, fixture));
    std::vector<std::pair<std::uint64_t, std::string>> want;
    for (std::size_t i = 0; i < kFixtureRows.size(); ++i) {
      if (kFixtureRows[i]) want.emplace_back(i + 1, *kFixtureRows[i]);  // rows numbered from 1; the null skipped
    }
    EXPECT_EQ(got, want) << column;
    EXPECT_EQ(reader.null_rows(), 1u) << column;
    EXPECT_EQ(reader.bytes_read(), reader.total_bytes()) << column;
  }
  // Preprocessing it gives the bytes the same texts give as JSONL.
  TempDir dir("trident-pre-parquet-read");
  const Tokenizer tok = small_tokenizer();
  std::string jsonl;
  for (const auto& row : kFixtureRows) {
    if (row) jsonl += nlohmann::json({{"text", *row}}).dump() + "\n";
  }
  write(dir / "docs.jsonl", jsonl);
  PreprocessOptions o;
  o.append_eod = true;
  o.inputs = {dir / "docs.jsonl"};
  o.output_prefix = dir / "from_jsonl";
  preprocess(tok, o);
  o.inputs = {fixture};
  o.json_key = "big";
  o.output_prefix = dir / "from_parquet";
  const PreprocessSummary s = preprocess(tok, o);
  EXPECT_EQ(s.null_rows, 1u);
  EXPECT_EQ(s.documents, 4u);  // the empty string has no tokens
  EXPECT_EQ(read(dir / "from_parquet.bin"), read(dir / "from_jsonl.bin"));
  EXPECT_EQ(read(dir / "from_parquet.idx"), read(dir / "from_jsonl.idx"));
  // The column must exist and hold strings; the errors name the file and list its columns.
  EXPECT_THAT(error_of([&] { DocumentReader r({fixture}, std::nullopt, "body"); }),
              HasSubstr("docs.parquet': no column \"body\" (use --json-key to choose another); its columns: id (int64), "
                        "text (string), big (large_string)"));
  EXPECT_THAT(error_of([&] { DocumentReader r({fixture}, std::nullopt, "id"); }),
              HasSubstr("docs.parquet': column \"id\" is int64, expected string or large_string"));
}

}  // namespace
}  // namespace trident::data
