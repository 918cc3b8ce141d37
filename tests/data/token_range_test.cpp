// IndexedDataset::token_range: the smallest and largest id of a .bin, which
// training compares with the tokenizer's vocabulary before it starts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "trident/data/dataset/indexed_dataset.h"

namespace trident::data {
namespace {

namespace fs = std::filesystem;

std::string make(const fs::path& dir, const std::string& name, TokenDType dtype,
                 const std::vector<std::vector<std::int32_t>>& docs) {
  const std::string prefix = (dir / name).string();
  IndexedDatasetBuilder b(prefix, dtype);
  for (const auto& d : docs) b.add_document(d);
  b.finalize();
  return prefix;
}

TEST(TokenRange, SmallestAndLargestIdOfEveryDtype) {
  const fs::path dir = fs::temp_directory_path() / ("trident-token-range-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Many documents, so the scan crosses its chunks; the extremes sit in the middle and at the end.
  std::vector<std::vector<std::int32_t>> docs;
  for (int i = 0; i < 3000; ++i) docs.push_back({7, 11 + i % 50, 9});
  docs[1234][1] = 2;
  docs.push_back({8, 60000});
  const auto u16 = IndexedDataset::open(make(dir, "u16", TokenDType::u16, docs));
  EXPECT_EQ(u16->token_range().min, 2);
  EXPECT_EQ(u16->token_range().max, 60000);
  docs.back().back() = 1 << 20;
  const auto i32 = IndexedDataset::open(make(dir, "i32", TokenDType::i32, docs));
  EXPECT_EQ(i32->token_range().max, 1 << 20);
  EXPECT_EQ(i32->token_range().min, 2);
  const auto empty = IndexedDataset::open(make(dir, "empty", TokenDType::u16, {}));
  EXPECT_LT(empty->token_range().max, empty->token_range().min);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trident::data
