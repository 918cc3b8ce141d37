#include "trident/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "trident/checkpoint/box.h"
#include "trident/core/atomic_file.h"
#include "trident/core/error.h"

namespace trident::checkpoint {

namespace {
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the limit Hugging Face's reader enforces

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {{DType::f32, "F32"}, {DType::bf16, "BF16"}, {DType::f16, "F16"},
                                     {DType::f64, "F64"}, {DType::i32, "I32"},   {DType::i64, "I64"},
                                     {DType::u8, "U8"},   {DType::u16, "U16"}};

std::string errno_text() { return std::strerror(errno); }
}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == dtype) return d.name;
  TRIDENT_FAIL("safetensors: no name for dtype {}", dtype);
}

DType parse_safetensors_dtype(std::string_view name, std::string_view context) {
  for (const auto& d : kDTypeNames)
    if (d.name == name) return d.dtype;
  TRIDENT_FAIL("{}: unsupported safetensors dtype '{}' (supported: F32, BF16, F16, F64, I32, I64, U8, U16)", context,
               name);
}

std::int64_t checked_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

struct SafetensorsFile::Mapping {
  void* base = nullptr;
  std::size_t size = 0;
  ~Mapping() {
    if (base && size) munmap(base, size);
  }
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TRIDENT_CHECK(fd >= 0, "cannot open safetensors file '{}': {}", path, errno_text());
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    TRIDENT_FAIL("cannot stat '{}': {}", path, errno_text());
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->size = static_cast<std::size_t>(st.st_size);
  if (mapping->size > 0) {
    mapping->base = mmap(nullptr, mapping->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping->base == MAP_FAILED) {
      mapping->base = nullptr;
      ::close(fd);
      TRIDENT_FAIL("cannot map '{}': {}", path, errno_text());
    }
  }
  ::close(fd);
  f.mapping_ = mapping;

  const auto* bytes = static_cast<const unsigned char*>(mapping->base);
  const std::uint64_t file_size = mapping->size;
  TRIDENT_CHECK(file_size >= 8, "'{}' is not a safetensors file: {} bytes, shorter than the 8-byte header length",
                path, file_size);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  TRIDENT_CHECK(header_len <= kMaxHeaderBytes && header_len <= file_size - 8,
                "'{}': header length {} exceeds the file ({} bytes) or the 100 MB limit (truncated or not safetensors)",
                path, header_len, file_size);
  f.data_start_ = 8 + header_len;
  const std::uint64_t data_size = file_size - f.data_start_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes + 8),
                                   reinterpret_cast<const char*>(bytes + 8 + header_len));
  } catch (const nlohmann::json::parse_error& e) {
    TRIDENT_FAIL("'{}': header is not valid JSON: {}", path, e.what());
  }
  TRIDENT_CHECK(header.is_object(), "'{}': header must be a JSON object", path);
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      TRIDENT_CHECK(v.is_object(), "'{}': __metadata__ must be an object of strings", path);
      for (auto m = v.begin(); m != v.end(); ++m) {
        TRIDENT_CHECK(m.value().is_string(), "'{}': __metadata__.{} must be a string", path, m.key());
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = fmt::format("'{}': tensor '{}'", path, name);
    TRIDENT_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
                  "{}: entry must have dtype, shape and data_offsets", where);
    TRIDENT_CHECK(v["dtype"].is_string(), "{}: dtype must be a string", where);
    TensorInfo info;
    info.name = name;
    info.dtype = parse_safetensors_dtype(v["dtype"].get<std::string>(), where);
    TRIDENT_CHECK(v["shape"].is_array(), "{}: shape must be an array", where);
    std::vector<std::int64_t> dims;
    for (const auto& d : v["shape"]) {
      // An unsigned JSON number above INT64_MAX would turn negative as int64.
      const bool fits = d.is_number_unsigned() ? d.get<std::uint64_t>() <= std::numeric_limits<std::int64_t>::max()
                                               : d.is_number_integer() && d.get<std::int64_t>() >= 0;
      TRIDENT_CHECK(fits, "{}: shape entries must be non-negative integers below 2^63, got {}", where, d.dump());
      dims.push_back(d.get<std::int64_t>());
    }
    info.shape = Shape(dims);
    const auto& off = v["data_offsets"];
    TRIDENT_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                  "{}: data_offsets must be [begin, end] of non-negative integers", where);
    info.begin = off[0].get<std::uint64_t>();
    info.end = off[1].get<std::uint64_t>();
    TRIDENT_CHECK(info.begin <= info.end && info.end <= data_size,
                  "{}: data_offsets [{}, {}) outside the data section of {} bytes (file truncated?)", where,
                  info.begin, info.end, data_size);
    // Checked: a byte count that wrapped around could match a short (even empty) range, while reads go
    // by the shape.
    const std::int64_t numel = checked_numel(info.shape);
    const auto element_bytes = static_cast<std::int64_t>(dtype_size(info.dtype));
    std::int64_t expected = 0;
    TRIDENT_CHECK(numel >= 0 && !__builtin_mul_overflow(numel, element_bytes, &expected),
                  "{}: shape {} of {} holds more than 2^63 bytes (data_offsets [{}, {}) hold {})", where, info.shape,
                  info.dtype, info.begin, info.end, info.end - info.begin);
    TRIDENT_CHECK(info.end - info.begin == static_cast<std::uint64_t>(expected),
                  "{}: {} bytes for shape {} of {} (expected {})", where, info.end - info.begin, info.shape, info.dtype,
                  expected);
    f.tensors_.push_back(std::move(info));
  }
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Each non-empty tensor is compared with the previous non-empty one (which ends last, the earlier
  // ones being disjoint), not just with its neighbour: an empty tensor in between must not hide an overlap.
  const TensorInfo* previous = nullptr;
  for (std::size_t i = 0; i < f.tensors_.size(); ++i) {
    const TensorInfo& t = f.tensors_[i];
    f.index_[t.name] = i;
    if (t.begin == t.end) continue;
    TRIDENT_CHECK(!previous || t.begin >= previous->end, "'{}': tensors '{}' and '{}' overlap", path, previous->name,
                  t.name);
    previous = &t;
  }
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& t : tensors_) out.push_back(t.name);
  return out;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = index_.find(name);
  TRIDENT_CHECK(it != index_.end(), "'{}' has no tensor '{}'", path_, name);
  return tensors_[it->second];
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& ti = info(name);
  const std::uint64_t offset = data_start_ + ti.begin;
  if (offset % dtype_size(ti.dtype) != 0 || ti.end == ti.begin) {
    // Misaligned for its element type (legal in the format): hand out an aligned copy.
    Tensor out = Tensor::empty(ti.shape, ti.dtype);
    if (out.nbytes()) std::memcpy(out.raw_data(), static_cast<const char*>(mapping_->base) + offset, out.nbytes());
    return out;
  }
  auto mapping = mapping_;
  auto storage = Storage::wrap(static_cast<char*>(mapping_->base) + offset, ti.end - ti.begin, Device::cpu(),
                               [mapping] { (void)mapping; });
  return Tensor(storage, 0, ti.shape, ti.dtype);
}

Tensor SafetensorsFile::read_box(const std::string& name, const std::vector<std::int64_t>& offsets,
                                 const Shape& shape) const {
  const TensorInfo& ti = info(name);
  const std::size_t r = ti.shape.rank();
  check_box(path_, name, ti.shape, offsets, shape);
  Tensor out = Tensor::empty(shape, ti.dtype);
  if (out.numel() == 0) return out;
  const std::size_t esz = dtype_size(ti.dtype);
  const char* src = static_cast<const char*>(mapping_->base) + data_start_ + ti.begin;
  char* dst = static_cast<char*>(out.raw_data());
  if (r == 0) {
    std::memcpy(dst, src, esz);
    return out;
  }
  // Copy contiguous runs along the last dimension, one per row of the box.
  std::vector<std::int64_t> gstride(r, 1);
  for (std::size_t d = r - 1; d-- > 0;) gstride[d] = gstride[d + 1] * ti.shape[d + 1];
  const std::int64_t run = shape[r - 1];
  const std::int64_t rows = out.numel() / run;
  for (std::int64_t row = 0; row < rows; ++row) {
    std::int64_t rem = row, g = offsets[r - 1];
    for (std::size_t d = r - 1; d-- > 0;) {
      g += (rem % shape[d] + offsets[d]) * gstride[d];
      rem /= shape[d];
    }
    std::memcpy(dst + static_cast<std::size_t>(row * run) * esz, src + static_cast<std::size_t>(g) * esz,
                static_cast<std::size_t>(run) * esz);
  }
  return out;
}

// --- writer ---

void SafetensorsWriter::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

void SafetensorsWriter::add(std::string name, const Tensor& tensor) {
  check_defined(tensor, "SafetensorsWriter::add", name);
  Tensor t = tensor;
  add_lazy(std::move(name), t.dtype(), t.shape(), [t] { return t; });
}

void SafetensorsWriter::add_lazy(std::string name, DType dtype, Shape shape, Producer producer) {
  TRIDENT_CHECK(name != "__metadata__" && !name.empty(), "safetensors: invalid tensor name '{}'", name);
  for (const Entry& e : entries_) TRIDENT_CHECK(e.name != name, "safetensors: tensor '{}' added twice", name);
  (void)safetensors_dtype_name(dtype);
  entries_.push_back(Entry{std::move(name), dtype, std::move(shape), std::move(producer)});
}

std::string SafetensorsWriter::header_json() const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::uint64_t offset = 0;
  for (const Entry& e : entries_) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(e.shape.numel()) * dtype_size(e.dtype);
    header[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)},
                      {"shape", e.shape.dims()},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  return text;
}

std::uint64_t SafetensorsWriter::file_size() const {
  std::uint64_t total = 8 + header_json().size();
  for (const Entry& e : entries_) total += static_cast<std::uint64_t>(e.shape.numel()) * dtype_size(e.dtype);
  return total;
}

namespace {
void write_all(int fd, const void* data, std::size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<std::size_t>(n, 1 << 30));
    if (w < 0 && errno == EINTR) continue;
    TRIDENT_CHECK(w > 0, "writing '{}' failed: {}", path, errno_text());
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}
}  // namespace

void SafetensorsWriter::write(const std::string& path) const {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TRIDENT_CHECK(fd >= 0, "cannot create '{}': {}", tmp, errno_text());
  try {
    const std::string header = header_json();
    unsigned char len[8];
    std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    write_all(fd, len, 8, tmp);
    write_all(fd, header.data(), header.size(), tmp);
    crash_point("safetensors header written");
    for (const Entry& e : entries_) {
      Tensor t = e.producer();
      TRIDENT_CHECK(t.defined() && t.dtype() == e.dtype && t.shape() == e.shape,
                    "safetensors: tensor '{}' was declared {}{} but produced {}", e.name, e.dtype, e.shape,
                    t.defined() ? t.describe() : std::string("nothing"));
      t = t.to(Device::cpu());
      write_all(fd, t.raw_data(), t.nbytes(), tmp);
      crash_point("safetensors tensor written");
    }
    TRIDENT_CHECK(::fsync(fd) == 0, "fsync of '{}' failed: {}", tmp, errno_text());
    ::close(fd);
    fd = -1;
    TRIDENT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "renaming '{}' to '{}' failed: {}", tmp, path,
                  errno_text());
    fsync_directory(std::filesystem::path(path).parent_path().string());
    crash_point("safetensors file renamed into place");
  } catch (...) {
    if (fd >= 0) ::close(fd);
    std::remove(tmp.c_str());
    throw;
  }
}

void crash_point(const char* where) {
  static const long target = [] {
    const char* v = std::getenv("TRIDENT_CHECKPOINT_CRASH_AT");
    return v ? std::strtol(v, nullptr, 10) : 0L;
  }();
  static long count = 0;
  if (target == 0) return;
  ++count;
  if (target < 0) {  // list the points instead (how the crash test learns their number)
    std::fprintf(stderr, "trident: crash_point %ld (%s)\n", count, where);
    return;
  }
  if (count != target) return;
  std::fprintf(stderr, "trident: crash_point %ld (%s): killing this process\n", count, where);
  std::fflush(stderr);
  ::raise(SIGKILL);
}

}  // namespace trident::checkpoint
