// The Parquet reader, with Apache Arrow's C++ Parquet reader (pyarrow's
// libraries, cmake/TridentParquet.cmake). Streaming: only the one column is
// read; pages come through a 1 MB buffered stream (no pre-buffering of whole
// row groups) and are decoded 1,024 rows at a time, so memory stays bounded by
// one record batch of text and one page, whatever the file's size.
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/properties.h>
#include <parquet/schema.h>

#include <exception>

#include "trident/core/error.h"
#include "trident/data/dataset/parquet_reader.h"

namespace trident::data {

namespace {
constexpr std::int64_t kBatchRows = 1024;
constexpr std::int64_t kStreamBuffer = 1 << 20;

// Arrow's messages may span lines ("...: \nDeserializing page header failed.\n") and quote raw bytes;
// errors are one printable line.
std::string one_line(std::string_view message) {
  std::string out;
  std::size_t start = 0;
  while (start < message.size()) {
    std::size_t end = message.find('\n', start);
    if (end == std::string_view::npos) end = message.size();
    std::string_view part = message.substr(start, end - start);
    while (!part.empty() && (part.back() == ' ' || part.back() == '\r')) part.remove_suffix(1);
    if (!part.empty() && !out.empty()) out += ' ';
    for (const char c : part) {  // other control characters (a corrupt byte quoted by Arrow) as \xNN
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
      } else {
        out += c;
      }
    }
    start = end + 1;
  }
  return out;
}

std::string column_list(const arrow::Schema& schema) {
  std::string out;
  for (const auto& f : schema.fields()) out += fmt::format("{}{} ({})", out.empty() ? "" : ", ", f->name(), f->type()->ToString());
  return out.empty() ? "none" : out;
}
}  // namespace

struct ParquetColumnReader::Impl {
  std::filesystem::path path;
  std::string column;
  std::unique_ptr<parquet::arrow::FileReader> file;
  std::unique_ptr<arrow::RecordBatchReader> batches;
  std::shared_ptr<arrow::Array> array;  // the current batch's column
  bool large = false;                   // large_string (64-bit offsets), else string
  std::int64_t pos = 0;                 // next row of `array`
  std::uint64_t rows = 0;
  int leaf = -1;                        // the column's index among the file's leaf columns
};

bool parquet_supported() noexcept { return true; }

std::string parquet_build_description() {
  return fmt::format("built (Apache Arrow {}, pyarrow's libraries)", arrow::GetBuildInfo().version_string);
}

ParquetColumnReader::ParquetColumnReader(const std::filesystem::path& path, const std::string& column)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.column = column;
  const std::string name = path.string();
  std::shared_ptr<arrow::Schema> schema;
  try {
    auto in = arrow::io::ReadableFile::Open(name);
    TRIDENT_CHECK(in.ok(), "cannot open input '{}': {}", name, one_line(in.status().message()));
    parquet::ReaderProperties props(arrow::default_memory_pool());
    props.enable_buffered_stream();
    props.set_buffer_size(kStreamBuffer);
    parquet::ArrowReaderProperties arrow_props;
    arrow_props.set_batch_size(kBatchRows);
    arrow_props.set_pre_buffer(false);
    arrow_props.set_use_threads(false);
    parquet::arrow::FileReaderBuilder builder;
    const arrow::Status opened = builder.Open(*in, props);
    TRIDENT_CHECK(opened.ok(), "input '{}' is not a readable Parquet file (corrupt or not Parquet): {}", name,
                  one_line(opened.message()));
    auto built = builder.properties(arrow_props)->Build();
    TRIDENT_CHECK(built.ok(), "input '{}' is not a readable Parquet file: {}", name, one_line(built.status().message()));
    m.file = std::move(built).ValueUnsafe();
    const arrow::Status got = m.file->GetSchema(&schema);
    TRIDENT_CHECK(got.ok(), "input '{}': cannot read its Parquet schema: {}", name, one_line(got.message()));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // parquet::ParquetException from a corrupt footer
    TRIDENT_FAIL("input '{}' is not a readable Parquet file (corrupt or not Parquet): {}", name, one_line(e.what()));
  }
  const auto fields = schema->GetAllFieldIndices(column);
  TRIDENT_CHECK(!fields.empty(), "input '{}': no column \"{}\" (use --json-key to choose another); its columns: {}",
                name, column, column_list(*schema));
  TRIDENT_CHECK(fields.size() == 1, "input '{}': {} columns are named \"{}\"", name, fields.size(), column);
  const auto& type = *schema->field(fields[0])->type();
  TRIDENT_CHECK(type.id() == arrow::Type::STRING || type.id() == arrow::Type::LARGE_STRING,
                "input '{}': column \"{}\" is {}, expected string or large_string (use --json-key to choose "
                "another); its columns: {}",
                name, column, type.ToString(), column_list(*schema));
  m.large = type.id() == arrow::Type::LARGE_STRING;
  const auto metadata = m.file->parquet_reader()->metadata();
  m.leaf = metadata->schema()->ColumnIndex(column);
  TRIDENT_CHECK(m.leaf >= 0, "input '{}': column \"{}\" is not a top-level Parquet column", name, column);
  TRIDENT_CHECK(metadata->num_rows() >= 0, "input '{}': negative row count {}", name, metadata->num_rows());
  m.rows = static_cast<std::uint64_t>(metadata->num_rows());
}

ParquetColumnReader::~ParquetColumnReader() = default;

std::uint64_t ParquetColumnReader::num_rows() const noexcept { return impl_->rows; }

ParquetColumnReader::Row ParquetColumnReader::next(std::string& out) {
  Impl& m = *impl_;
  try {
    while (true) {
      if (m.array && m.pos < m.array->length()) {
        const std::int64_t i = m.pos++;
        if (m.array->IsNull(i)) return Row::null;
        const std::string_view v = m.large ? static_cast<const arrow::LargeStringArray&>(*m.array).GetView(i)
                                           : static_cast<const arrow::StringArray&>(*m.array).GetView(i);
        out.assign(v.data(), v.size());
        return Row::value;
      }
      if (!m.batches) {
        std::vector<int> row_groups(static_cast<std::size_t>(m.file->num_row_groups()));
        for (std::size_t g = 0; g < row_groups.size(); ++g) row_groups[g] = static_cast<int>(g);
        auto reader = m.file->GetRecordBatchReader(row_groups, {m.leaf});
        TRIDENT_CHECK(reader.ok(), "input '{}': cannot read column \"{}\": {}", m.path.string(), m.column,
                      one_line(reader.status().message()));
        m.batches = std::move(reader).ValueUnsafe();
      }
      std::shared_ptr<arrow::RecordBatch> batch;
      const arrow::Status st = m.batches->ReadNext(&batch);
      TRIDENT_CHECK(st.ok(), "input '{}': error reading column \"{}\" (corrupt file?): {}", m.path.string(), m.column,
                    one_line(st.message()));
      if (!batch) return Row::end;
      TRIDENT_CHECK(batch->num_columns() == 1, "input '{}': read {} columns for \"{}\", expected 1", m.path.string(),
                    batch->num_columns(), m.column);
      m.array = batch->column(0);
      m.pos = 0;
      const auto want = m.large ? arrow::Type::LARGE_STRING : arrow::Type::STRING;
      TRIDENT_CHECK(m.array->type_id() == want, "input '{}': column \"{}\" read as {}, its schema says {}",
                    m.path.string(), m.column, m.array->type()->ToString(), m.large ? "large_string" : "string");
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    TRIDENT_FAIL("input '{}': error reading column \"{}\" (corrupt file?): {}", m.path.string(), m.column, one_line(e.what()));
  }
}

}  // namespace trident::data
