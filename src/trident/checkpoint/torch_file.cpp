#include "trident/checkpoint/torch_file.h"

#include <zip.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "trident/checkpoint/box.h"
#include "trident/core/error.h"

namespace trident::checkpoint {

namespace {

constexpr std::uint64_t kMaxPickleBytes = 1ULL << 30;  // a state dict's data.pkl is kilobytes to megabytes

std::string zip_error_text(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string text = zip_error_strerror(&e);
  zip_error_fini(&e);
  return text;
}

// Why libzip found no archive: the first bytes tell a truncated zip from torch.save's legacy format.
std::string not_a_zip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4] = {};
  in.read(head, 4);
  if (std::memcmp(head, "PK\x03\x04", 4) == 0)
    return fmt::format("'{}' is a truncated or damaged zip archive (its central directory is missing)", path);
  if (static_cast<unsigned char>(head[0]) == 0x80 && static_cast<unsigned char>(head[2]) == 0x8a)
    return fmt::format(
        "'{}' is in torch.save's legacy format (PyTorch before 1.6), which trident does not read: load it and "
        "save it again with a newer PyTorch, or convert it to safetensors",
        path);
  return fmt::format("'{}' is not a PyTorch checkpoint (torch.save since PyTorch 1.6 writes a zip archive)", path);
}

}  // namespace

struct TorchFile::Archive {
  zip_t* zip = nullptr;
  std::string path;
  std::string prefix;  // "ARCHIVE/"
  bool big_endian = false;
  std::map<std::string, zip_uint64_t> storage_entries;  // storage key → entry index
  ~Archive() {
    if (zip) zip_discard(zip);
  }

  zip_uint64_t locate(const std::string& name) const {
    const zip_int64_t i = zip_name_locate(zip, name.c_str(), ZIP_FL_ENC_RAW);
    return i < 0 ? ~zip_uint64_t{0} : static_cast<zip_uint64_t>(i);
  }
  zip_stat_t stat(zip_uint64_t index) const {
    zip_stat_t st;
    zip_stat_init(&st);
    TRIDENT_CHECK(
        zip_stat_index(zip, index, 0, &st) == 0 && (st.valid & ZIP_STAT_SIZE) && (st.valid & ZIP_STAT_COMP_METHOD),
        "'{}': cannot read entry {} of the archive: {}", path, index, zip_strerror(zip));
    return st;
  }
  zip_uint64_t size_of(zip_uint64_t index) const { return stat(index).size; }
  // Bytes [begin, begin + n) of entry `index`.
  std::vector<char> read(zip_uint64_t index, std::uint64_t begin, std::uint64_t n) const {
    const char* name = zip_get_name(zip, index, ZIP_FL_ENC_RAW);
    zip_file_t* f = zip_fopen_index(zip, index, 0);
    TRIDENT_CHECK(f, "'{}': cannot open entry '{}': {}", path, name ? name : "?", zip_strerror(zip));
    std::vector<char> out(n);
    std::string error;
    // Stored entries (what torch.save writes) seek; compressed ones are read from their start.
    if (begin > 0 && stat(index).comp_method == ZIP_CM_STORE) {
      if (zip_fseek(f, static_cast<zip_int64_t>(begin), SEEK_SET) != 0) error = zip_file_strerror(f);
    } else if (begin > 0) {
      std::vector<char> skip(std::min<std::uint64_t>(begin, 1 << 20));
      for (std::uint64_t left = begin; left > 0 && error.empty();) {
        const std::uint64_t chunk = std::min<std::uint64_t>(left, skip.size());
        if (zip_fread(f, skip.data(), chunk) != static_cast<zip_int64_t>(chunk)) error = zip_file_strerror(f);
        left -= chunk;
      }
    }
    if (error.empty() && n > 0 && zip_fread(f, out.data(), n) != static_cast<zip_int64_t>(n))
      error = zip_file_strerror(f);
    zip_fclose(f);
    TRIDENT_CHECK(error.empty(), "'{}': entry '{}' is truncated or damaged: {}", path, name ? name : "?", error);
    return out;
  }
};

TorchFile TorchFile::open(const std::string& path) {
  TRIDENT_CHECK(std::filesystem::is_regular_file(path), "cannot open PyTorch checkpoint '{}': no such file", path);
  TorchFile f;
  f.path_ = path;
  auto archive = std::make_shared<Archive>();
  archive->path = path;
  int code = 0;
  archive->zip = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (!archive->zip) {
    if (code == ZIP_ER_NOZIP) TRIDENT_FAIL("{}", not_a_zip(path));
    TRIDENT_FAIL("cannot open PyTorch checkpoint '{}': {}", path, zip_error_text(code));
  }
  f.archive_ = archive;

  // The archive's folder: that of its data.pkl (torch.save puts every entry in one top-level folder).
  const zip_int64_t entries = zip_get_num_entries(archive->zip, 0);
  bool torchscript = false;
  for (zip_int64_t i = 0; i < entries; ++i) {
    const char* raw = zip_get_name(archive->zip, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_RAW);
    if (!raw) continue;
    const std::string name = raw;
    const std::size_t slash = name.find('/');
    if (slash == std::string::npos) continue;
    const std::string rest = name.substr(slash + 1);
    if (rest == "data.pkl" && archive->prefix.empty()) archive->prefix = name.substr(0, slash + 1);
    torchscript = torchscript || rest == "constants.pkl";
  }
  TRIDENT_CHECK(!torchscript, "'{}' is a TorchScript module (torch.jit.save), not a state dict from torch.save", path);
  TRIDENT_CHECK(!archive->prefix.empty(),
                "'{}': the zip archive has no ARCHIVE/data.pkl, so torch.save did not write it", path);

  const zip_uint64_t pkl = archive->locate(archive->prefix + "data.pkl");
  const zip_uint64_t pkl_size = archive->size_of(pkl);
  TRIDENT_CHECK(pkl_size <= kMaxPickleBytes, "'{}': {}data.pkl holds {} bytes (at most {} for a state dict)", path,
                archive->prefix, pkl_size, kMaxPickleBytes);
  const std::vector<char> pickle = archive->read(pkl, 0, pkl_size);

  const zip_uint64_t order = archive->locate(archive->prefix + "byteorder");
  if (order != ~zip_uint64_t{0}) {
    const zip_uint64_t n = archive->size_of(order);
    TRIDENT_CHECK(n <= 16, "'{}': {}byteorder holds {} bytes (expected \"little\" or \"big\")", path, archive->prefix,
                  n);
    const std::vector<char> bytes = archive->read(order, 0, n);
    const std::string value(bytes.begin(), bytes.end());
    TRIDENT_CHECK(value == "little" || value == "big", "'{}': {}byteorder is '{}' (expected \"little\" or \"big\")",
                  path, archive->prefix, value);
    archive->big_endian = value == "big";
  }

  f.records_ = parse_torch_pickle(std::as_bytes(std::span(pickle)), path);
  std::map<std::string, const TorchTensorRecord*> storage_owner;  // the first tensor viewing each storage
  for (std::size_t i = 0; i < f.records_.size(); ++i) {
    const TorchTensorRecord& r = f.records_[i];
    f.index_[r.name] = i;
    auto [owner, fresh] = storage_owner.emplace(r.storage, &r);
    if (!fresh) {
      TRIDENT_CHECK(owner->second->type == r.type && owner->second->storage_numel == r.storage_numel,
                    "'{}': storage '{}' is {} elements of torch.{} for tensor '{}' but {} elements of torch.{} for "
                    "tensor '{}'",
                    path, r.storage, owner->second->storage_numel, owner->second->type->name, owner->second->name,
                    r.storage_numel, r.type->name, r.name);
      continue;
    }
    const std::string entry = archive->prefix + "data/" + r.storage;
    const zip_uint64_t index = archive->locate(entry);
    TRIDENT_CHECK(index != ~zip_uint64_t{0}, "'{}': tensor '{}' views storage '{}', but the archive has no entry '{}'",
                  path, r.name, r.storage, entry);
    const std::uint64_t needed = static_cast<std::uint64_t>(r.storage_numel) * r.type->element_size;  // checked
    const zip_uint64_t size = archive->size_of(index);
    TRIDENT_CHECK(size >= needed,
                  "'{}': storage entry '{}' holds {} bytes, but tensor '{}' needs {} ({} elements of torch.{})", path,
                  entry, size, r.name, needed, r.storage_numel, r.type->name);
    archive->storage_entries[r.storage] = index;
  }
  return f;
}

std::vector<std::string> TorchFile::names() const {
  std::vector<std::string> out;
  for (const TorchTensorRecord& r : records_) out.push_back(r.name);
  return out;
}

const TorchTensorRecord& TorchFile::record(const std::string& name) const {
  auto it = index_.find(name);
  TRIDENT_CHECK(it != index_.end(), "'{}': no tensor named '{}'", path_, name);
  return records_[it->second];
}

TorchTensorInfo TorchFile::info(const std::string& name) const {
  const TorchTensorRecord& r = record(name);
  return {r.name, r.shape, r.type};
}

Tensor TorchFile::tensor(const std::string& name) const {
  const Shape& shape = record(name).shape;
  return read_box(name, std::vector<std::int64_t>(shape.rank(), 0), shape);
}

Tensor TorchFile::read_box(const std::string& name, const std::vector<std::int64_t>& offsets,
                           const Shape& shape) const {
  const TorchTensorRecord& r = record(name);
  const std::size_t rank = r.shape.rank();
  TRIDENT_CHECK(r.type->has_dtype,
                "'{}': tensor '{}' is stored as torch.{}, which trident does not read (it reads "
                "Float, Double, Half, BFloat16, Long, Int and Byte storages)",
                path_, name, r.type->name);
  check_box(path_, name, r.shape, offsets, shape);
  // Only a broadcast view (a zero stride) holds more elements than its storage: such a size is not
  // allocated on the file's word.
  TRIDENT_CHECK(shape.numel() <= r.storage_numel,
                "'{}': tensor '{}' of shape {} repeats the {} elements of its storage (a broadcast view, stride [{}]), "
                "which trident does not read",
                path_, name, r.shape, r.storage_numel, fmt::join(r.stride, ", "));
  Tensor out = Tensor::empty(shape, r.type->dtype);
  if (out.numel() == 0) return out;
  // The storage elements the box spans (inside the storage: the whole view was checked when parsed).
  std::int64_t first = r.offset, last = r.offset;
  for (std::size_t d = 0; d < rank; ++d) {
    first += offsets[d] * r.stride[d];
    last += (offsets[d] + shape[d] - 1) * r.stride[d];
  }
  const std::size_t esz = r.type->element_size;
  const std::vector<char> span =
      archive_->read(archive_->storage_entries.at(r.storage), static_cast<std::uint64_t>(first) * esz,
                     static_cast<std::uint64_t>(last - first + 1) * esz);
  char* dst = static_cast<char*>(out.raw_data());
  // Row by row along the last dimension; a row is one memcpy when its elements are adjacent.
  const std::int64_t run = rank ? shape[rank - 1] : 1;
  const std::int64_t step = rank ? r.stride[rank - 1] : 1;
  const std::int64_t rows = out.numel() / run;
  for (std::int64_t row = 0; row < rows; ++row) {
    std::int64_t rem = row, at = 0;
    for (std::size_t d = rank ? rank - 1 : 0; d-- > 0;) {
      at += (rem % shape[d]) * r.stride[d];
      rem /= shape[d];
    }
    const char* src = span.data() + static_cast<std::size_t>(at) * esz;
    char* to = dst + static_cast<std::size_t>(row * run) * esz;
    if (step == 1) {
      std::memcpy(to, src, static_cast<std::size_t>(run) * esz);
    } else {
      for (std::int64_t i = 0; i < run; ++i) std::memcpy(to + i * esz, src + i * step * esz, esz);
    }
  }
  if (archive_->big_endian && esz > 1) {
    for (std::int64_t i = 0; i < out.numel(); ++i) std::reverse(dst + i * esz, dst + (i + 1) * esz);
  }
  return out;
}

}  // namespace trident::checkpoint
