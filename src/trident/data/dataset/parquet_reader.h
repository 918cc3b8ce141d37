// Reads one string column of a Parquet file, row by row, in bounded memory:
// Apache Arrow's Parquet reader decodes it record batch by record batch (1,024
// rows), streaming the column's pages from the file rather than loading a row
// group or the file at once.
//
// Whether this is built depends on the build (TRIDENT_WITH_PARQUET, see
// cmake/TridentParquet.cmake): with Arrow C++ found (pyarrow's libraries) it is
// parquet_reader_arrow.cpp, else parquet_reader_unavailable.cpp, whose
// constructor throws an error that says how to enable it and how to convert the
// file to JSONL instead. Nothing outside those two files depends on which.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace trident::data {

// True when this build reads Parquet.
bool parquet_supported() noexcept;
// For `trident info`: "built (Apache Arrow 26.0.1)" or "not built (...)".
std::string parquet_build_description();

class ParquetColumnReader {
 public:
  // Opens `path` and checks that it is a Parquet file whose schema has a
  // top-level column `column` of type string or large_string. Throws
  // trident::Error naming the file otherwise: unreadable or corrupt, the
  // column missing (listing the file's columns), or not a string column
  // (naming its type); and, in a build without Parquet, saying so.
  ParquetColumnReader(const std::filesystem::path& path, const std::string& column);
  ~ParquetColumnReader();
  ParquetColumnReader(const ParquetColumnReader&) = delete;
  ParquetColumnReader& operator=(const ParquetColumnReader&) = delete;

  // Rows in the file (nulls included).
  std::uint64_t num_rows() const noexcept;

  enum class Row { value, null, end };
  // The next row: `value` with its text in `out`, `null` (out untouched), or
  // `end` after the last. A read or decode error throws trident::Error naming
  // the file and the column.
  Row next(std::string& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trident::data
