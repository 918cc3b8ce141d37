#include "trident/data/dataset/indexed_dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "test_util.h"

namespace trident::data {
namespace {

using testing::error_of;
using testing::TempDir;
using ::testing::HasSubstr;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Little-endian bytes of v.
template <typename T>
std::string le(T v) {
  std::string s(sizeof(T), '\0');
  for (std::size_t i = 0; i < sizeof(T); ++i) s[i] = static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff);
  return s;
}

TEST(IndexedDataset, GoldenLayout) {
  TempDir dir("trident-idx-golden");
  IndexedDatasetBuilder b(dir / "toy", TokenDType::u16);
  b.add_document(std::vector<std::int32_t>{1, 2, 3});
  b.add_document(std::vector<std::int32_t>{4});
  b.add_document(std::vector<std::int32_t>{5, 6});
  b.finalize();
  // Hand-computed layout (docs/data.md#the-binidx-format): 3 sequences, 4 document indices.
  std::string want("MMIDIDX\0\0", 9);
  want += le<std::uint64_t>(1) + le<std::uint8_t>(8) + le<std::uint64_t>(3) + le<std::uint64_t>(4);
  want += le<std::int32_t>(3) + le<std::int32_t>(1) + le<std::int32_t>(2);
  want += le<std::int64_t>(0) + le<std::int64_t>(6) + le<std::int64_t>(8);
  want += le<std::int64_t>(0) + le<std::int64_t>(1) + le<std::int64_t>(2) + le<std::int64_t>(3);
  ASSERT_EQ(want.size(), 102u);
  EXPECT_EQ(slurp(dir / "toy.idx"), want);
  std::string bin;
  for (int t = 1; t <= 6; ++t) bin += le<std::uint16_t>(static_cast<std::uint16_t>(t));
  EXPECT_EQ(slurp(dir / "toy.bin"), bin);

  for (bool mmap : {true, false}) {
    auto ds = IndexedDataset::open(dir / "toy", mmap);
    EXPECT_EQ(ds->size(), 3u);
    EXPECT_EQ(ds->document_count(), 3u);
    EXPECT_EQ(ds->total_tokens(), 6);
    EXPECT_EQ(ds->sequence(0), (std::vector<std::int32_t>{1, 2, 3}));
    EXPECT_EQ(ds->sequence(2), (std::vector<std::int32_t>{5, 6}));
    std::int32_t two[2];
    ds->read(0, 1, 2, two);
    EXPECT_EQ(two[0], 2);
    EXPECT_EQ(two[1], 3);
  }
}

TEST(IndexedDataset, Int32ForLargeVocabularies) {
  EXPECT_EQ(best_fitting_dtype(65499), TokenDType::u16);
  EXPECT_EQ(best_fitting_dtype(65500), TokenDType::i32);
  TempDir dir("trident-idx-i32");
  IndexedDatasetBuilder b(dir / "big", TokenDType::i32);
  b.add_document(std::vector<std::int32_t>{100000, 7});
  b.finalize();
  EXPECT_EQ(IndexedDataset::open(dir / "big")->sequence(0), (std::vector<std::int32_t>{100000, 7}));
  IndexedDatasetBuilder small(dir / "small", TokenDType::u16);
  EXPECT_THAT(error_of([&] { small.add_document(std::vector<std::int32_t>{70000}); }),
              HasSubstr("token id 70000 does not fit uint16"));
}

TEST(IndexedDataset, UnfinishedBuilderLeavesNothing) {
  TempDir dir("trident-idx-abort");
  {
    IndexedDatasetBuilder b(dir / "x", TokenDType::u16);
    b.add_document(std::vector<std::int32_t>{1});
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(IndexedDataset, CorruptFilesGetClearErrors) {
  TempDir dir("trident-idx-corrupt");
  IndexedDatasetBuilder b(dir / "d", TokenDType::u16);
  b.add_document(std::vector<std::int32_t>{1, 2, 3});
  b.add_document(std::vector<std::int32_t>{4, 5});
  b.finalize();
  const std::string idx = slurp(dir / "d.idx"), bin = slurp(dir / "d.bin");
  auto open_with = [&](const std::string& i, const std::string& bn) {
    spit(dir / "e.idx", i);
    spit(dir / "e.bin", bn);
    return error_of([&] { IndexedDataset::open(dir / "e"); });
  };
  EXPECT_THAT(open_with(idx.substr(0, 20), bin), HasSubstr("truncated index: 20 bytes, the header alone needs 34"));
  EXPECT_THAT(open_with(idx.substr(0, idx.size() - 8), bin), HasSubstr("truncated index"));
  EXPECT_THAT(open_with(idx + "xx", bin), HasSubstr("inconsistent index"));
  EXPECT_THAT(open_with("XXIDIDX" + idx.substr(7), bin), HasSubstr("not a Megatron index"));
  std::string bad = idx;
  bad[9] = 2;
  EXPECT_THAT(open_with(bad, bin), HasSubstr("index version 2, expected 1"));
  bad = idx;
  bad[17] = 9;
  EXPECT_THAT(open_with(bad, bin), HasSubstr("dtype code 9"));
  bad = idx;
  bad[18] = static_cast<char>(0xff);  // sequence count far beyond the file
  EXPECT_THAT(open_with(bad, bin), HasSubstr("header claims"));
  bad = idx;
  bad[34] = static_cast<char>(0xfe);  // length of sequence 0 = -2
  bad[35] = bad[36] = bad[37] = static_cast<char>(0xff);
  EXPECT_THAT(open_with(bad, bin), HasSubstr("sequence 0 has negative length -2"));
  bad = idx;
  bad[34 + 8 + 8] = 4;  // pointer of sequence 1
  EXPECT_THAT(open_with(bad, bin), HasSubstr("sequence 1 starts at byte 4 of the .bin, expected 6"));
  bad = idx;
  bad[34 + 24 + 8] = 2;  // document_indices[1] = 2 > ... then [2] = 2: fine; make the last wrong
  bad[34 + 24 + 16] = 1;
  EXPECT_THAT(open_with(bad, bin), HasSubstr("document_indices[2] = 1 is not in [2, 2]"));
  EXPECT_THAT(open_with(idx, bin.substr(0, 6)), HasSubstr("e.bin: 6 bytes, but"));
  EXPECT_THAT(open_with(idx, bin.substr(0, 6)), HasSubstr("truncated data"));
  EXPECT_THAT(open_with(idx, bin + "zz"), HasSubstr("extra bytes at the end"));
  EXPECT_THAT(error_of([&] { IndexedDataset::open(dir / "missing"); }), HasSubstr("missing.idx' does not exist"));
}

TEST(IndexedDataset, ReadRejectsRangesOutsideTheSequence) {
  TempDir dir("trident-idx-read");
  IndexedDatasetBuilder b(dir / "d", TokenDType::u16);
  b.add_document(std::vector<std::int32_t>{1, 2, 3});
  b.finalize();
  auto ds = IndexedDataset::open(dir / "d");
  std::int32_t out[3];
  // A negative count once wrapped around the unsigned bounds check and read far past the sequence.
  EXPECT_THAT(error_of([&] { ds->read(0, 1, -1, out); }), HasSubstr("-1 tokens from offset 1 are out of range"));
  EXPECT_THAT(error_of([&] { ds->read(0, -1, 2, out); }), HasSubstr("2 tokens from offset -1 are out of range"));
  EXPECT_THAT(error_of([&] { ds->read(0, 2, 2, out); }), HasSubstr("for sequence 0 of length 3"));
  ds->read(0, 3, 0, out);  // the empty range at the end is fine
}

// PREFIX.idx/.bin with the given dtype code and token bytes, one sequence per document.
void write_raw(const std::string& prefix, TokenDType dtype, const std::vector<std::int32_t>& lengths,
               const std::string& bin) {
  IndexContent c;
  c.dtype = dtype;
  c.sequence_lengths = lengths;
  std::int64_t pointer = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    c.sequence_pointers.push_back(pointer);
    c.document_indices.push_back(static_cast<std::int64_t>(i));
    pointer += lengths[i] * static_cast<std::int64_t>(token_dtype_size(dtype));
  }
  c.document_indices.push_back(static_cast<std::int64_t>(lengths.size()));
  spit(prefix + ".idx", serialize_index(c));
  spit(prefix + ".bin", bin);
}

TEST(IndexedDataset, FloatTokensAreRejectedAtOpen) {
  TempDir dir("trident-idx-float");
  write_raw(dir / "f32", TokenDType::f32, {2}, le<std::uint32_t>(0x3f800000) + le<std::uint32_t>(0x40000000));
  EXPECT_THAT(error_of([&] { IndexedDataset::open(dir / "f32"); }),
              HasSubstr("f32.idx: dtype code 7 (float32) is a floating-point type"));
  write_raw(dir / "f64", TokenDType::f64, {1}, le<std::uint64_t>(0x3ff0000000000000));
  EXPECT_THAT(error_of([&] { IndexedDataset::open(dir / "f64"); }),
              HasSubstr("f64.idx: dtype code 6 (float64) is a floating-point type"));
}

TEST(IndexedDataset, Int64TokensReadWhenTheyFitInt32) {
  TempDir dir("trident-idx-i64");
  write_raw(dir / "ok", TokenDType::i64, {2}, le<std::int64_t>(100000) + le<std::int64_t>(7));
  EXPECT_EQ(IndexedDataset::open(dir / "ok")->sequence(0), (std::vector<std::int32_t>{100000, 7}));
  // 2^32 + 5 once read back as 5.
  write_raw(dir / "big", TokenDType::i64, {1, 2},
            le<std::int64_t>(1) + le<std::int64_t>(2) + le<std::int64_t>((std::int64_t{1} << 32) + 5));
  auto big = IndexedDataset::open(dir / "big");
  EXPECT_THAT(error_of([&] { big->sequence(1); }),
              HasSubstr("big.bin: token 1 of sequence 1 is 4294967301, beyond int32"));
}

TEST(IndexedDataset, NegativeTokenIdsAreNamedErrors) {
  TempDir dir("trident-idx-negative");
  write_raw(dir / "i8", TokenDType::i8, {3}, std::string("\x05\x7f\xfd", 3));
  EXPECT_THAT(error_of([&] { IndexedDataset::open(dir / "i8")->sequence(0); }),
              HasSubstr("i8.bin: token 2 of sequence 0 is -3, and token ids are never negative (int8 data"));
  write_raw(dir / "i16", TokenDType::i16, {1, 2}, le<std::int16_t>(7) + le<std::int16_t>(-2) + le<std::int16_t>(9));
  auto i16 = IndexedDataset::open(dir / "i16");
  std::int32_t out[2];
  i16->read(1, 1, 1, out);  // the token after the bad one reads
  EXPECT_EQ(out[0], 9);
  EXPECT_THAT(error_of([&] { i16->read(1, 0, 2, out); }), HasSubstr("i16.bin: token 0 of sequence 1 is -2"));
  write_raw(dir / "i32", TokenDType::i32, {1}, le<std::int32_t>(-1));
  EXPECT_THAT(error_of([&] { IndexedDataset::open(dir / "i32")->sequence(0); }), HasSubstr("is -1"));
  write_raw(dir / "i64", TokenDType::i64, {1}, le<std::int64_t>(-4));
  EXPECT_THAT(error_of([&] { IndexedDataset::open(dir / "i64")->sequence(0); }), HasSubstr("is -4"));
}

}  // namespace
}  // namespace trident::data
