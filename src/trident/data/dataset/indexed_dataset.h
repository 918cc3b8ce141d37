// Megatron's indexed dataset: PREFIX.bin (token arrays, concatenated, no
// header) and PREFIX.idx (docs/data.md#the-binidx-format), byte-compatible with Megatron-LM's
// and oslo's MMapIndexedDataset, so either side reads what the other writes.
//
//   .idx: "MMIDIDX\0\0" | u64 version 1 | u8 dtype code | u64 N sequences |
//         u64 D document indices | i32 lengths[N] | i64 byte pointers[N] |
//         i64 document_indices[D]   (little-endian; D = documents + 1)
//
// A sequence is one token array; a document is a run of sequences
// (document_indices[k]..document_indices[k+1]). trident writes one sequence per
// document, as Megatron's preprocess_data does without --split-sentences.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trident/data/dataset/mapped_file.h"

namespace trident::data {

// Megatron's dtype codes.
enum class TokenDType : std::uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8 };

std::size_t token_dtype_size(TokenDType dtype);
std::string_view token_dtype_name(TokenDType dtype);
// Megatron's best_fitting_dtype: u16 when the vocabulary is under 65500, else i32.
TokenDType best_fitting_dtype(std::int64_t vocab_size);

inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr std::size_t kIndexHeaderBytes = 34;

// The parsed and validated content of an .idx file.
struct IndexContent {
  TokenDType dtype = TokenDType::u16;
  std::vector<std::int32_t> sequence_lengths;
  std::vector<std::int64_t> sequence_pointers;
  std::vector<std::int64_t> document_indices;
};

// Parses an .idx image and checks it against the size of its .bin: magic,
// version, dtype code, exact file size, non-negative lengths, contiguous
// pointers starting at 0, document indices from 0 to N non-decreasing, and
// the .bin size. Throws trident::Error naming `idx_name` (or `bin_name`) and
// what is inconsistent.
IndexContent parse_index(std::span<const std::byte> idx, std::uint64_t bin_bytes, std::string_view idx_name,
                         std::string_view bin_name);

// The .idx bytes for `content` (pointers are written as given).
std::string serialize_index(const IndexContent& content);

class IndexedDataset {
 public:
  // Opens PREFIX.idx and PREFIX.bin; the .bin is memory-mapped (mmap = true)
  // or read into memory. Immutable; safe to read from several threads.
  // Float dtypes (codes 6, 7) are rejected: token ids are integers.
  static std::shared_ptr<const IndexedDataset> open(const std::string& prefix, bool mmap = true);

  const std::string& prefix() const noexcept { return prefix_; }
  TokenDType dtype() const noexcept { return index_.dtype; }
  std::size_t size() const noexcept { return index_.sequence_lengths.size(); }  // sequences
  std::size_t document_count() const noexcept { return index_.document_indices.size() - 1; }
  std::span<const std::int32_t> sequence_lengths() const noexcept { return index_.sequence_lengths; }
  std::span<const std::int64_t> sequence_pointers() const noexcept { return index_.sequence_pointers; }
  std::span<const std::int64_t> document_indices() const noexcept { return index_.document_indices; }
  std::int64_t total_tokens() const noexcept { return total_tokens_; }
  // XXH3 of the .idx bytes: identifies the dataset in index caches.
  std::uint64_t index_hash() const noexcept { return index_hash_; }

  // Copies tokens [offset, offset + length) of sequence `i` into `out` as int32.
  // Throws if the range is not within the sequence (negative values included),
  // or if an int64 token id does not fit int32.
  void read(std::size_t i, std::int64_t offset, std::int64_t length, std::int32_t* out) const;
  std::vector<std::int32_t> sequence(std::size_t i) const;

  // The smallest and largest token id in the .bin's sequences (a scan of the
  // mapped file, vectorised: about a second per few GB once it is in the page
  // cache). {0, -1} for a dataset without tokens.
  struct TokenRange {
    std::int64_t min = 0;
    std::int64_t max = -1;
  };
  TokenRange token_range() const;
  // The .bin's size in bytes.
  std::uint64_t bin_bytes() const noexcept { return bin_.size(); }

 private:
  std::string prefix_;
  IndexContent index_;
  MappedFile bin_;
  std::int64_t total_tokens_ = 0;
  std::uint64_t index_hash_ = 0;
};

// Writes PREFIX.bin and PREFIX.idx, streaming: tokens go straight to the .bin
// and sequence lengths to a temporary file, so memory stays constant however
// many documents are added. Both files appear (renamed from temporaries) only
// on finalize(); a builder destroyed before that leaves no output behind.
class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(const std::string& prefix, TokenDType dtype);
  ~IndexedDatasetBuilder();
  IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
  IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

  // Appends one document of one sequence. Throws if a token does not fit the dtype.
  void add_document(std::span<const std::int32_t> tokens);
  void finalize();

  std::uint64_t documents() const noexcept { return documents_; }
  std::uint64_t tokens() const noexcept { return tokens_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::uint64_t documents_ = 0;
  std::uint64_t tokens_ = 0;
};

}  // namespace trident::data
