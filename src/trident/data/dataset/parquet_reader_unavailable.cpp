// The Parquet reader of a build without Arrow C++ (TRIDENT_WITH_PARQUET=OFF,
// or pyarrow not found when configured): every Parquet input is refused with
// an error that says how to get a build that reads it, and how to convert the
// file to JSONL, which every build reads.
#include "trident/core/error.h"
#include "trident/data/dataset/parquet_reader.h"

namespace trident::data {

struct ParquetColumnReader::Impl {};

bool parquet_supported() noexcept { return false; }

std::string parquet_build_description() {
  return "not built (TRIDENT_WITH_PARQUET=OFF, or no pyarrow when configured: ./scripts/python_env.sh installs it, "
         "then configure again)";
}

ParquetColumnReader::ParquetColumnReader(const std::filesystem::path& path, const std::string& column) {
  TRIDENT_FAIL(
      "input '{}' is Parquet, but this trident was built without Parquet support (pyarrow's Arrow C++ libraries "
      "were not found when it was configured). To read it, install pyarrow with ./scripts/python_env.sh, then "
      "configure and build again (cmake -S . -B build && cmake --build build); or convert it to JSONL with a Python "
      "that has pyarrow and preprocess that: python -c 'import sys, json, pyarrow.parquet as pq; "
      "[print(json.dumps({{sys.argv[2]: t}})) for b in pq.ParquetFile(sys.argv[1]).iter_batches(columns=[sys.argv[2]]) "
      "for t in b.column(0).to_pylist() if t is not None]' '{}' '{}' > '{}.jsonl'",
      path.string(), path.string(), column, path.stem().string());
}

ParquetColumnReader::~ParquetColumnReader() = default;

std::uint64_t ParquetColumnReader::num_rows() const noexcept { return 0; }

ParquetColumnReader::Row ParquetColumnReader::next(std::string&) { return Row::end; }

}  // namespace trident::data
