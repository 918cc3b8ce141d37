// Streams raw documents out of input files, one record at a time, in constant
// memory: a line of plain text, a line of JSONL (parsed later, by
// extract_document_text, so the JSON work can run on worker threads), or a
// whole file. Each record remembers its file and line for error messages.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trident::data {

enum class InputFormat {
  text,       // one document per line (the newline, and a CR before it, is not part of it)
  jsonl,      // one JSON object per line; the document is the string at a key
  text_file,  // each file is one document
};

// Picks jsonl for *.jsonl / *.json files, text otherwise.
InputFormat detect_input_format(const std::filesystem::path& path);

struct RawDocument {
  std::string content;  // the line (without its newline) or the whole file
  std::uint32_t file_index = 0;
  std::uint64_t line = 0;  // 1-based; 0 for whole files
};

class DocumentReader {
 public:
  // `format` nullopt: detect per file.
  DocumentReader(std::vector<std::filesystem::path> files, std::optional<InputFormat> format);
  ~DocumentReader();

  // The next record, or false at the end of the last file. Blank JSONL lines are skipped.
  bool next(RawDocument& doc);

  const std::filesystem::path& file(std::uint32_t index) const { return files_[index]; }
  InputFormat format_of(std::uint32_t index) const { return formats_[index]; }
  std::uint64_t bytes_read() const noexcept { return bytes_read_; }
  std::uint64_t total_bytes() const noexcept { return total_bytes_; }

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
};

// The text of a record: the content itself, or for JSONL the string at
// `json_key`. Throws trident::Error naming file:line when the line is not JSON,
// not an object, lacks the key, or the value is not a string.
std::string extract_document_text(RawDocument& doc, InputFormat format, std::string_view json_key,
                                  const std::filesystem::path& file);

}  // namespace trident::data
