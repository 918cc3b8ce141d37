// Streams raw documents out of input files, one record at a time, in constant
// memory: a line of plain text, a line of JSONL (parsed later, by
// extract_document_text, so the JSON work can run on worker threads), a row of
// a Parquet file's text column (parquet_reader.h), or a whole file. Each record
// remembers its file and line (Parquet: row) for error messages.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trident/data/dataset/parquet_reader.h"

namespace trident::data {

enum class InputFormat {
  text,       // one document per line (the newline, and a CR before it, is not part of it)
  jsonl,      // one JSON object per line; the document is the string at a key
  text_file,  // each file is one document
  parquet,    // one document per row: the string in a column (null rows are skipped and counted)
};

// Picks jsonl for *.jsonl / *.json files, parquet for *.parquet, text otherwise.
InputFormat detect_input_format(const std::filesystem::path& path);

struct RawDocument {
  std::string content;  // the line (without its newline) or the whole file
  std::uint32_t file_index = 0;
  std::uint64_t line = 0;  // 1-based line, or row for Parquet; 0 for whole files
};

class DocumentReader {
 public:
  // `format` nullopt: detect per file. `column`: the column of Parquet files
  // holding the text (the JSONL key, extract_document_text's json_key). Every
  // Parquet file is opened here, so a missing column, a corrupt file or a build
  // without Parquet fails before any work is done.
  DocumentReader(std::vector<std::filesystem::path> files, std::optional<InputFormat> format,
                 std::string column = "text");
  ~DocumentReader();

  // The next record, or false at the end of the last file. Blank JSONL lines
  // and null Parquet values are skipped (the latter counted in null_rows()).
  bool next(RawDocument& doc);

  const std::filesystem::path& file(std::uint32_t index) const { return files_[index]; }
  InputFormat format_of(std::uint32_t index) const { return formats_[index]; }
  std::uint64_t bytes_read() const noexcept { return bytes_read_; }
  std::uint64_t total_bytes() const noexcept { return total_bytes_; }
  std::uint64_t null_rows() const noexcept { return null_rows_; }

 private:
  bool open_next();
  std::vector<std::filesystem::path> files_;
  std::vector<InputFormat> formats_;
  std::uint32_t current_ = 0;
  bool opened_ = false;
  std::FILE* in_ = nullptr;
  std::uint64_t line_ = 0;
  std::uint64_t bytes_read_ = 0;
  std::uint64_t total_bytes_ = 0;
  // Parquet: the open file's reader; bytes_read_ advances by its share of the
  // file's size per row read (the text is compressed and encoded in it).
  std::string column_;
  std::unique_ptr<ParquetColumnReader> parquet_;
  std::uint64_t parquet_base_ = 0;  // bytes_read_ when the file was opened
  std::uint64_t file_bytes_ = 0;
  std::uint64_t null_rows_ = 0;
};

// The text of a record: the content itself (text, file, Parquet), or for JSONL
// the string at `json_key`. Throws trident::Error naming file:line when the line is not JSON,
// not an object, lacks the key, or the value is not a string.
std::string extract_document_text(RawDocument& doc, InputFormat format, std::string_view json_key,
                                  const std::filesystem::path& file);

}  // namespace trident::data
