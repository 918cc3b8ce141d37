// Hugging Face safetensors: reader (mmap, validated) and streaming writer.
//
// Layout: u64 little-endian header length N, N bytes of JSON (padded with
// spaces to a multiple of 8), then the tensor bytes. The JSON maps each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end)} relative to the
// data section, plus an optional "__metadata__" object of string → string.
//
// The reader maps the file and checks everything before use: header length,
// JSON shape, dtype names, offsets inside the data section, byte counts equal
// to numel × element size, no overlaps. Tensors are returned as zero-copy
// views that keep the mapping alive, or as copies of a box (a shard).
//
// The writer needs only names, dtypes and shapes up front; tensor bytes are
// produced one tensor at a time while writing (so exporting a model larger
// than memory streams), into a temporary file that is fsync'd and renamed:
// the file appears whole or not at all.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/rng.h"
#include "trident/core/tensor.h"

namespace trident::checkpoint {

// "F32", "BF16", ... ↔ DType. Throws for names trident has no dtype for.
std::string_view safetensors_dtype_name(DType dtype);
DType parse_safetensors_dtype(std::string_view name, std::string_view context);
// Elements of a shape read from a file: -1 when a dimension is negative or the count exceeds int64.
std::int64_t checked_numel(const Shape& shape);

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin = 0;  // byte offsets in the data section
  std::uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`; errors name the file and what is wrong.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const noexcept { return path_; }
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  // Tensor names in file order (by offset).
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;

  // Zero-copy view of a whole tensor (read-only by contract; keeps the file mapped).
  Tensor tensor(const std::string& name) const;
  // Copy of the box at `offsets` with extent `shape` (e.g. this rank's shard).
  Tensor read_box(const std::string& name, const std::vector<std::int64_t>& offsets, const Shape& shape) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> mapping_;
  std::uint64_t data_start_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t> index_;
};

class SafetensorsWriter {
 public:
  // A tensor whose bytes are produced when the writer reaches it.
  using Producer = std::function<Tensor()>;

  void set_metadata(std::string key, std::string value);
  void add(std::string name, const Tensor& tensor);  // keeps a reference; copied at write()
  void add_lazy(std::string name, DType dtype, Shape shape, Producer producer);
  std::size_t size() const noexcept { return entries_.size(); }
  // Total bytes the file will have.
  std::uint64_t file_size() const;

  // Writes `path` atomically (temporary file in the same directory, fsync, rename).
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    Producer producer;
  };
  std::string header_json() const;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};


// Fault injection for the crash tests (tests/checkpoint/crash_test.sh): with
// TRIDENT_CHECKPOINT_CRASH_AT=n in the environment, the n-th call in this
// process (counting from 1) kills it with SIGKILL, as a power cut or the OOM
// killer would; n = -1 lists every point on stderr instead. Writers call it
// between every durable step. A no-op otherwise.
void crash_point(const char* where);

}  // namespace trident::checkpoint
