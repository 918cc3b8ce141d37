#include "trident/data/dataset/document_reader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "trident/core/error.h"

namespace trident::data {

InputFormat detect_input_format(const std::filesystem::path& path) {
  const auto ext = path.extension().string();
  if (ext == ".parquet") return InputFormat::parquet;
  return ext == ".jsonl" || ext == ".json" ? InputFormat::jsonl : InputFormat::text;
}

DocumentReader::DocumentReader(std::vector<std::filesystem::path> files, std::optional<InputFormat> format,
                               std::string column)
    : files_(std::move(files)), column_(std::move(column)) {
  TRIDENT_CHECK(!files_.empty(), "no input files");
  for (const auto& f : files_) {
    std::error_code ec;
    TRIDENT_CHECK(std::filesystem::is_regular_file(f, ec), "input '{}' does not exist or is not a file", f.string());
    total_bytes_ += std::filesystem::file_size(f, ec);
    formats_.push_back(format ? *format : detect_input_format(f));
    // Opened now (its footer and schema) and again when its turn comes.
    if (formats_.back() == InputFormat::parquet) ParquetColumnReader check(f, column_);
  }
}

DocumentReader::~DocumentReader() {
  if (in_) std::fclose(in_);
}

bool DocumentReader::open_next() {
  if (in_ || parquet_) {
    if (in_) std::fclose(in_);
    in_ = nullptr;
    parquet_.reset();
    ++current_;
  }
  if (current_ >= files_.size()) return false;
  line_ = 0;
  if (formats_[current_] == InputFormat::parquet) {
    parquet_ = std::make_unique<ParquetColumnReader>(files_[current_], column_);
    parquet_base_ = bytes_read_;
    std::error_code ec;
    file_bytes_ = std::filesystem::file_size(files_[current_], ec);
    return true;
  }
  in_ = std::fopen(files_[current_].c_str(), "rb");
  TRIDENT_CHECK(in_ != nullptr, "cannot open input '{}': {}", files_[current_].string(), std::strerror(errno));
  static_cast<void>(std::setvbuf(in_, nullptr, _IOFBF, 1 << 20));
  return true;
}

bool DocumentReader::next(RawDocument& doc) {
  while (true) {
    if (!opened_) {
      opened_ = true;
      if (!open_next()) return false;
    }
    if (current_ >= files_.size()) return false;
    doc.file_index = current_;
    doc.content.clear();
    if (formats_[current_] == InputFormat::parquet) {
      const auto row = parquet_->next(doc.content);
      if (row == ParquetColumnReader::Row::end) {
        bytes_read_ = parquet_base_ + file_bytes_;
        if (!open_next()) return false;
        continue;
      }
      doc.line = ++line_;
      if (const std::uint64_t rows = parquet_->num_rows(); rows > 0) {
        const double share = static_cast<double>(std::min(line_, rows)) / static_cast<double>(rows);
        bytes_read_ = parquet_base_ + static_cast<std::uint64_t>(share * static_cast<double>(file_bytes_));
      }
      if (row == ParquetColumnReader::Row::null) {
        ++null_rows_;
        continue;
      }
      return true;
    }
    if (formats_[current_] == InputFormat::text_file) {
      char buf[1 << 16];
      std::size_t n = 0;
      while ((n = std::fread(buf, 1, sizeof(buf), in_)) > 0) doc.content.append(buf, n);
      TRIDENT_CHECK(!std::ferror(in_), "error reading '{}': {}", files_[current_].string(), std::strerror(errno));
      bytes_read_ += doc.content.size();
      doc.line = 0;
      if (!open_next()) opened_ = true;  // past the end: next() returns false
      return true;
    }
    // One line; getc_unlocked keeps this fast without a line-length limit.
    int c = 0;
    bool any = false;
    while ((c = getc_unlocked(in_)) != EOF) {
      any = true;
      if (c == '\n') break;
      doc.content.push_back(static_cast<char>(c));
    }
    TRIDENT_CHECK(!std::ferror(in_), "error reading '{}': {}", files_[current_].string(), std::strerror(errno));
    if (!any) {  // end of this file
      if (!open_next()) return false;
      continue;
    }
    bytes_read_ += doc.content.size() + (c == '\n' ? 1 : 0);
    doc.line = ++line_;
    if (!doc.content.empty() && doc.content.back() == '\r') doc.content.pop_back();
    if (formats_[current_] == InputFormat::jsonl &&
        doc.content.find_first_not_of(" \t\r") == std::string::npos) {
      continue;  // blank JSONL line
    }
    return true;
  }
}

std::string extract_document_text(RawDocument& doc, InputFormat format, std::string_view json_key,
                                  const std::filesystem::path& file) {
  if (format != InputFormat::jsonl) return std::move(doc.content);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(doc.content);
  } catch (const nlohmann::json::parse_error& e) {
    const std::string what = e.what();
    TRIDENT_FAIL("{}:{}: not a JSON line (at byte {} of the line: {})", file.string(), doc.line, e.byte,
                 what.substr(what.find(']') + 2));
  } catch (const nlohmann::json::exception& e) {
    TRIDENT_FAIL("{}:{}: not a JSON line ({})", file.string(), doc.line, e.what());
  }
  TRIDENT_CHECK(j.is_object(), "{}:{}: expected a JSON object, got {}", file.string(), doc.line, j.type_name());
  auto it = j.find(json_key);
  TRIDENT_CHECK(it != j.end(), "{}:{}: the JSON object has no key \"{}\" (use --json-key to choose another)",
                file.string(), doc.line, json_key);
  TRIDENT_CHECK(it->is_string(), "{}:{}: \"{}\" is {} {}, expected a string", file.string(), doc.line, json_key,
                it->type_name(), it->dump().substr(0, 40));
  return it->get<std::string>();
}

}  // namespace trident::data
