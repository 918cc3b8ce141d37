#include "trident/data/dataset/indexed_dataset.h"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "trident/core/atomic_file.h"
#include "trident/core/error.h"
#include "trident/core/interrupt.h"

namespace trident::data {
namespace {

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // little-endian host assumed (x86-64, aarch64)
  return v;
}

template <typename T>
void append(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

bool valid_dtype_code(std::uint8_t code) { return code >= 1 && code <= 8; }

}  // namespace

std::size_t token_dtype_size(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::u8:
    case TokenDType::i8: return 1;
    case TokenDType::i16:
    case TokenDType::u16: return 2;
    case TokenDType::i32:
    case TokenDType::f32: return 4;
    case TokenDType::i64:
    case TokenDType::f64: return 8;
  }
  TRIDENT_FAIL("invalid token dtype code {}", static_cast<int>(dtype));
}

std::string_view token_dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::u8: return "uint8";
    case TokenDType::i8: return "int8";
    case TokenDType::i16: return "int16";
    case TokenDType::i32: return "int32";
    case TokenDType::i64: return "int64";
    case TokenDType::f64: return "float64";
    case TokenDType::f32: return "float32";
    case TokenDType::u16: return "uint16";
  }
  return "invalid";
}

TokenDType best_fitting_dtype(std::int64_t vocab_size) { return vocab_size < 65500 ? TokenDType::u16 : TokenDType::i32; }

IndexContent parse_index(std::span<const std::byte> idx, std::uint64_t bin_bytes, std::string_view idx_name,
                         std::string_view bin_name) {
  const std::uint64_t size = idx.size();
  TRIDENT_CHECK(size >= kIndexHeaderBytes, "{}: truncated index: {} bytes, the header alone needs {}", idx_name, size,
                kIndexHeaderBytes);
  const std::byte* p = idx.data();
  TRIDENT_CHECK(std::memcmp(p, kIndexMagic, sizeof(kIndexMagic)) == 0,
                "{}: not a Megatron index (the file does not start with \"MMIDIDX\\0\\0\")", idx_name);
  const auto version = load<std::uint64_t>(p + 9);
  TRIDENT_CHECK(version == 1, "{}: index version {}, expected 1", idx_name, version);
  const auto code = load<std::uint8_t>(p + 17);
  TRIDENT_CHECK(valid_dtype_code(code), "{}: dtype code {} is not one of Megatron's codes 1..8", idx_name, code);
  const auto n = load<std::uint64_t>(p + 18);
  const auto d = load<std::uint64_t>(p + 26);
  // Bound the counts by the file size before multiplying, so a corrupt header cannot overflow.
  TRIDENT_CHECK(n <= size / 12 && d <= size / 8,
                "{}: truncated or corrupt index: header claims {} sequences and {} document indices but the file has "
                "{} bytes", idx_name, n, d, size);
  const std::uint64_t expected = kIndexHeaderBytes + 12 * n + 8 * d;
  TRIDENT_CHECK(size == expected,
                "{}: {} index: {} bytes, but {} sequences and {} document indices need {} bytes", idx_name,
                size < expected ? "truncated" : "inconsistent", size, n, d, expected);
  IndexContent c;
  c.dtype = static_cast<TokenDType>(code);
  const std::size_t item = token_dtype_size(c.dtype);
  c.sequence_lengths.resize(n);
  c.sequence_pointers.resize(n);
  c.document_indices.resize(d);
  // An empty vector's data() may be null, which memcpy must not get even for 0 bytes (an empty dataset).
  if (n > 0) {
    std::memcpy(c.sequence_lengths.data(), p + kIndexHeaderBytes, 4 * n);
    std::memcpy(c.sequence_pointers.data(), p + kIndexHeaderBytes + 4 * n, 8 * n);
  }
  if (d > 0) std::memcpy(c.document_indices.data(), p + kIndexHeaderBytes + 12 * n, 8 * d);
  std::uint64_t offset = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    TRIDENT_CHECK(c.sequence_lengths[i] >= 0, "{}: sequence {} has negative length {}", idx_name, i,
                  c.sequence_lengths[i]);
    TRIDENT_CHECK(static_cast<std::uint64_t>(c.sequence_pointers[i]) == offset,
                  "{}: sequence {} starts at byte {} of the .bin, expected {} (right after sequence {})", idx_name, i,
                  c.sequence_pointers[i], offset, i == 0 ? std::string("-") : std::to_string(i - 1));
    offset += static_cast<std::uint64_t>(c.sequence_lengths[i]) * item;
  }
  TRIDENT_CHECK(d >= 1, "{}: no document indices (expected at least the leading 0)", idx_name);
  TRIDENT_CHECK(c.document_indices[0] == 0, "{}: document_indices[0] is {}, expected 0", idx_name,
                c.document_indices[0]);
  for (std::uint64_t k = 1; k < d; ++k) {
    TRIDENT_CHECK(c.document_indices[k] >= c.document_indices[k - 1] && static_cast<std::uint64_t>(c.document_indices[k]) <= n,
                  "{}: document_indices[{}] = {} is not in [{}, {}]", idx_name, k, c.document_indices[k],
                  c.document_indices[k - 1], n);
  }
  TRIDENT_CHECK(static_cast<std::uint64_t>(c.document_indices[d - 1]) == n,
                "{}: the last document index is {}, expected the sequence count {}", idx_name,
                c.document_indices[d - 1], n);
  TRIDENT_CHECK(bin_bytes == offset, "{}: {} bytes, but {} describes {} sequences of {} bytes in total ({} {})",
                bin_name, bin_bytes, idx_name, n, offset, bin_bytes < offset ? "truncated" : "extra bytes",
                bin_bytes < offset ? "data" : "at the end");
  return c;
}

std::string serialize_index(const IndexContent& c) {
  std::string out(kIndexMagic, sizeof(kIndexMagic));
  append<std::uint64_t>(out, 1);
  append<std::uint8_t>(out, static_cast<std::uint8_t>(c.dtype));
  append<std::uint64_t>(out, c.sequence_lengths.size());
  append<std::uint64_t>(out, c.document_indices.size());
  for (auto v : c.sequence_lengths) append(out, v);
  for (auto v : c.sequence_pointers) append(out, v);
  for (auto v : c.document_indices) append(out, v);
  return out;
}

std::shared_ptr<const IndexedDataset> IndexedDataset::open(const std::string& prefix, bool mmap) {
  auto ds = std::make_shared<IndexedDataset>();
  ds->prefix_ = prefix;
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  TRIDENT_CHECK(std::filesystem::exists(idx_path), "dataset '{}': index file '{}' does not exist", prefix, idx_path);
  TRIDENT_CHECK(std::filesystem::exists(bin_path), "dataset '{}': data file '{}' does not exist", prefix, bin_path);
  const MappedFile idx(idx_path, false);
  ds->bin_ = MappedFile(bin_path, mmap);
  ds->index_ = parse_index(idx.bytes(), ds->bin_.size(), idx_path, bin_path);
  // A float .idx is a valid Megatron file but not token ids; say so now, not at the first read.
  const TokenDType dtype = ds->index_.dtype;
  TRIDENT_CHECK(dtype != TokenDType::f32 && dtype != TokenDType::f64,
                "{}: dtype code {} ({}) is a floating-point type; token ids must be integers", idx_path,
                static_cast<int>(dtype), token_dtype_name(dtype));
  ds->index_hash_ = XXH3_64bits(idx.bytes().data(), idx.size());
  for (auto len : ds->index_.sequence_lengths) ds->total_tokens_ += len;
  return ds;
}

namespace {

// Min and max of `n` little-endian values of type V at `p`; simple loops the compiler vectorises.
template <typename V>
IndexedDataset::TokenRange range_of(const std::byte* p, std::size_t n) {
  IndexedDataset::TokenRange r;
  if (n == 0) return r;
  constexpr std::size_t kChunk = 4096;  // 32 KiB at most on the stack
  V lo = std::numeric_limits<V>::max(), hi = std::numeric_limits<V>::lowest();
  V buf[kChunk];
  for (std::size_t begin = 0; begin < n; begin += kChunk) {
    if (begin % (kChunk * 256) == 0) interruption_point(LongWait::token_scan);  // each 1M tokens
    const std::size_t m = std::min(kChunk, n - begin);
    std::memcpy(buf, p + begin * sizeof(V), m * sizeof(V));  // no unaligned loads through V*
    for (std::size_t k = 0; k < m; ++k) {
      lo = buf[k] < lo ? buf[k] : lo;
      hi = buf[k] > hi ? buf[k] : hi;
    }
  }
  r.min = static_cast<std::int64_t>(lo);
  r.max = static_cast<std::int64_t>(hi);
  return r;
}

}  // namespace

IndexedDataset::TokenRange IndexedDataset::token_range() const {
  // Sequences are contiguous from byte 0 (parse_index checks it): the tokens are the bytes up to the
  // end of the last sequence.
  const std::size_t item = token_dtype_size(index_.dtype);
  const std::size_t n = static_cast<std::size_t>(total_tokens_);
  TRIDENT_CHECK(n <= bin_.size() / item, "{}.bin: {} bytes cannot hold the index's {} tokens", prefix_, bin_.size(),
                total_tokens_);
  const std::byte* p = bin_.bytes().data();
  switch (index_.dtype) {
    case TokenDType::u8: return range_of<std::uint8_t>(p, n);
    case TokenDType::i8: return range_of<std::int8_t>(p, n);
    case TokenDType::i16: return range_of<std::int16_t>(p, n);
    case TokenDType::u16: return range_of<std::uint16_t>(p, n);
    case TokenDType::i32: return range_of<std::int32_t>(p, n);
    case TokenDType::i64: return range_of<std::int64_t>(p, n);
    default: TRIDENT_FAIL("{}: token dtype {} is not an integer type", prefix_, token_dtype_name(index_.dtype));
  }
}

void IndexedDataset::read(std::size_t i, std::int64_t offset, std::int64_t length, std::int32_t* out) const {
  TRIDENT_CHECK(i < size(), "{}: sequence {} out of range (the dataset has {})", prefix_, i, size());
  // Written so that no sum can wrap: a negative or huge length must not pass.
  const std::int64_t len = index_.sequence_lengths[i];
  TRIDENT_CHECK(0 <= offset && offset <= len && 0 <= length && length <= len - offset,
                "{}: {} tokens from offset {} are out of range for sequence {} of length {}", prefix_, length, offset,
                i, len);
  const auto n = static_cast<std::size_t>(length);
  const std::size_t item = token_dtype_size(index_.dtype);
  const std::byte* p = bin_.bytes().data() + index_.sequence_pointers[i] + static_cast<std::size_t>(offset) * item;
  switch (index_.dtype) {
    case TokenDType::u16:
      for (std::size_t k = 0; k < n; ++k) out[k] = load<std::uint16_t>(p + 2 * k);
      break;
    case TokenDType::i32:
      std::memcpy(out, p, 4 * n);
      break;
    case TokenDType::u8:
      for (std::size_t k = 0; k < n; ++k) out[k] = load<std::uint8_t>(p + k);
      break;
    case TokenDType::i8:
      for (std::size_t k = 0; k < n; ++k) out[k] = load<std::int8_t>(p + k);
      break;
    case TokenDType::i16:
      for (std::size_t k = 0; k < n; ++k) out[k] = load<std::int16_t>(p + 2 * k);
      break;
    case TokenDType::i64:
      // Valid files may store ids as int64 (numpy's default integer); only an id
      // beyond int32 is an error, never silently truncated.
      for (std::size_t k = 0; k < n; ++k) {
        const auto v = load<std::int64_t>(p + 8 * k);
        using Limits = std::numeric_limits<std::int32_t>;
        TRIDENT_CHECK(Limits::min() <= v && v <= Limits::max(), "{}.bin: token {} of sequence {} is {}, beyond int32",
                      prefix_, offset + static_cast<std::int64_t>(k), i, v);
        out[k] = static_cast<std::int32_t>(v);
      }
      break;
    case TokenDType::f32:
    case TokenDType::f64:
      TRIDENT_FAIL("{}: token dtype {} is not an integer type", prefix_, token_dtype_name(index_.dtype));
  }
  // A signed dtype can hold what no token id is; catching it here names the file, where the model's
  // embedding would only name a position in a batch.
  if (index_.dtype == TokenDType::i8 || index_.dtype == TokenDType::i16 || index_.dtype == TokenDType::i32 ||
      index_.dtype == TokenDType::i64) {
    const std::int32_t* bad = std::find_if(out, out + n, [](std::int32_t v) { return v < 0; });
    TRIDENT_CHECK(bad == out + n, "{}.bin: token {} of sequence {} is {}, and token ids are never negative ({} "
                  "data: is the file damaged, or written with the wrong dtype?)", prefix_,
                  offset + (bad - out), i, *bad, token_dtype_name(index_.dtype));
  }
}

std::vector<std::int32_t> IndexedDataset::sequence(std::size_t i) const {
  TRIDENT_CHECK(i < size(), "{}: sequence {} out of range (the dataset has {})", prefix_, i, size());
  std::vector<std::int32_t> out(static_cast<std::size_t>(index_.sequence_lengths[i]));
  read(i, 0, static_cast<std::int64_t>(out.size()), out.data());
  return out;
}

// ------------------------------------------------------------------ builder

struct IndexedDatasetBuilder::Impl {
  std::string prefix;
  TokenDType dtype;
  AtomicOutputFile bin;
  std::FILE* lengths = nullptr;  // i32 per sequence, read back by finalize()
  std::vector<char> buffer;
  bool finalized = false;

  Impl(const std::string& p, TokenDType t) : prefix(p), dtype(t), bin(p + ".bin") {
    lengths = std::tmpfile();
    TRIDENT_CHECK(lengths != nullptr, "cannot create a temporary file for '{}.idx': {}", prefix, std::strerror(errno));
  }
  ~Impl() {
    if (lengths) std::fclose(lengths);
  }
};

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& prefix, TokenDType dtype) {
  TRIDENT_CHECK(dtype == TokenDType::u16 || dtype == TokenDType::i32,
                "'{}': trident writes uint16 or int32 tokens, not {}", prefix, token_dtype_name(dtype));
  impl_ = std::make_unique<Impl>(prefix, dtype);
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() = default;

void IndexedDatasetBuilder::add_document(std::span<const std::int32_t> tokens) {
  TRIDENT_CHECK(impl_ && !impl_->finalized, "add_document after finalize");
  TRIDENT_CHECK(tokens.size() < (std::size_t{1} << 31), "'{}': a document of {} tokens exceeds the int32 length field",
                impl_->prefix, tokens.size());
  auto& buf = impl_->buffer;
  if (impl_->dtype == TokenDType::u16) {
    buf.resize(tokens.size() * 2);
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      TRIDENT_CHECK(tokens[k] >= 0 && tokens[k] < 65536, "'{}': token id {} does not fit uint16", impl_->prefix,
                    tokens[k]);
      const auto v = static_cast<std::uint16_t>(tokens[k]);
      std::memcpy(buf.data() + 2 * k, &v, 2);
    }
    impl_->bin.write(buf.data(), buf.size());
  } else {
    impl_->bin.write(tokens.data(), tokens.size() * 4);
  }
  const auto len = static_cast<std::int32_t>(tokens.size());
  TRIDENT_CHECK(std::fwrite(&len, 4, 1, impl_->lengths) == 1, "error writing a temporary file: {}", std::strerror(errno));
  ++documents_;
  tokens_ += tokens.size();
}

void IndexedDatasetBuilder::finalize() {
  TRIDENT_CHECK(impl_ && !impl_->finalized, "finalize called twice");
  const std::uint64_t n = documents_;
  AtomicOutputFile idx(impl_->prefix + ".idx");
  std::string header(kIndexMagic, sizeof(kIndexMagic));
  append<std::uint64_t>(header, 1);
  append<std::uint8_t>(header, static_cast<std::uint8_t>(impl_->dtype));
  append<std::uint64_t>(header, n);
  append<std::uint64_t>(header, n + 1);
  idx.write(header);
  // Two streaming passes over the lengths: the lengths, then the pointers.
  std::FILE* f = impl_->lengths;
  TRIDENT_CHECK(std::fflush(f) == 0, "error flushing a temporary file: {}", std::strerror(errno));
  std::vector<std::int32_t> chunk(1 << 16);
  std::vector<std::int64_t> out(chunk.size());
  const std::int64_t item = static_cast<std::int64_t>(token_dtype_size(impl_->dtype));
  for (int pass = 0; pass < 2; ++pass) {
    std::rewind(f);
    std::int64_t pointer = 0;
    std::uint64_t left = n;
    while (left > 0) {
      const std::size_t k = std::min<std::uint64_t>(left, chunk.size());
      TRIDENT_CHECK(std::fread(chunk.data(), 4, k, f) == k, "error reading back a temporary file");
      if (pass == 0) {
        idx.write(chunk.data(), 4 * k);
      } else {
        for (std::size_t i = 0; i < k; ++i) {
          out[i] = pointer;
          pointer += chunk[i] * item;
        }
        idx.write(out.data(), 8 * k);
      }
      left -= k;
    }
  }
  for (std::uint64_t base = 0; base <= n; base += out.size()) {
    const std::size_t k = std::min<std::uint64_t>(n + 1 - base, out.size());
    for (std::size_t i = 0; i < k; ++i) out[i] = static_cast<std::int64_t>(base + i);
    idx.write(out.data(), 8 * k);
  }
  // The index goes last, and an older one first: a reader never pairs this .bin with an earlier .idx
  // (a crash in between leaves a .bin without its index, which reads as no dataset).
  std::error_code ec;
  std::filesystem::remove(impl_->prefix + ".idx", ec);
  impl_->bin.commit();
  idx.commit();
  impl_->finalized = true;
}

}  // namespace trident::data
