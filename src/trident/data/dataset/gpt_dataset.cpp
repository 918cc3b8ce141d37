#include "trident/data/dataset/gpt_dataset.h"

#include <xxhash.h>

#include <cstring>
#include <numeric>

#include "trident/core/atomic_file.h"
#include "trident/core/error.h"
#include "trident/core/interrupt.h"
#include "trident/core/rng.h"
#include "trident/data/dataset/mapped_file.h"
#include "trident/data/dataset/shuffle.h"

namespace trident::data {
namespace {

// Megatron's separate_final_epoch threshold.
constexpr double kFinalEpochThreshold = 0.80;

template <typename T>
std::string to_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// One cache entry: the files DIR/KEY-<what>.
struct CacheEntry {
  std::filesystem::path dir;
  std::string key;
  std::filesystem::path file(std::string_view what) const { return dir / fmt::format("{}-{}", key, what); }
};

template <typename T>
std::vector<T> load_array(const std::filesystem::path& path, std::int64_t expected, std::string_view rebuild) {
  const MappedFile f(path, false);
  // Compared by division, so that a corrupt count cannot overflow into a match.
  TRIDENT_CHECK(
      expected >= 0 && f.size() % sizeof(T) == 0 && f.size() / sizeof(T) == static_cast<std::size_t>(expected),
      "index cache file '{}' has {} bytes, expected {} values of {} bytes; {}", path.string(), f.size(), expected,
      sizeof(T), rebuild);
  std::vector<T> v(static_cast<std::size_t>(expected));
  if (expected) std::memcpy(v.data(), f.bytes().data(), f.size());
  return v;
}

// sample() indexes with the indices unchecked, so a damaged cache entry must
// fail here, once, naming the file — not as a wild read at some later sample.
// Checks what sample() relies on, with the order build_gpt_indices guarantees.
// The entry is derived data: the remedy is always to delete it.
GptIndices load_cached_indices(const CacheEntry& entry, std::span<const std::int32_t> sizes, DocumentRange documents,
                               bool add_extra_token) {
  const std::string rebuild = fmt::format("delete {}-* to rebuild", (entry.dir / entry.key).string());
  const auto counts_file = entry.file("sizes.bin");
  const auto counts = load_array<std::int64_t>(counts_file, 3, rebuild);
  // Counts of: document index, sample boundaries = 2 * (samples + 1), samples.
  TRIDENT_CHECK(counts[0] >= 0 && counts[2] >= 0 && counts[1] % 2 == 0 && counts[1] / 2 - 1 == counts[2],
                "index cache file '{}': counts {}, {}, {} are inconsistent (the second must be 2 x (third + 1)); {}",
                counts_file.string(), counts[0], counts[1], counts[2], rebuild);
  GptIndices ix;

  const auto document_file = entry.file("document_index.bin");
  ix.document_index = load_array<std::int32_t>(document_file, counts[0], rebuild);
  const std::int64_t first = std::max<std::int64_t>(documents.begin, 0);
  const std::int64_t last = std::min(documents.end, static_cast<std::int64_t>(sizes.size()));
  for (std::size_t k = 0; k < ix.document_index.size(); ++k) {
    const std::int64_t d = ix.document_index[k];
    TRIDENT_CHECK(first <= d && d < last,
                  "index cache file '{}': entry {} is document {}, not in the range [{}, {}); {}",
                  document_file.string(), k, d, first, last, rebuild);
  }

  const auto shuffle_file = entry.file("shuffle_index.bin");
  ix.shuffle_index = load_array<std::int64_t>(shuffle_file, counts[2], rebuild);
  const std::int64_t samples = ix.samples();
  for (std::size_t k = 0; k < ix.shuffle_index.size(); ++k) {
    const std::int64_t j = ix.shuffle_index[k];
    TRIDENT_CHECK(0 <= j && j < samples, "index cache file '{}': entry {} is {}, not a sample in [0, {}); {}",
                  shuffle_file.string(), k, j, samples, rebuild);
  }

  const auto sample_file = entry.file("sample_index.bin");
  ix.sample_index = load_array<std::int64_t>(sample_file, counts[1], rebuild);
  const auto& si = ix.sample_index;
  const auto positions = static_cast<std::int64_t>(ix.document_index.size());
  TRIDENT_CHECK(si[0] == 0 && si[1] == 0,
                "index cache file '{}': the first sample starts at ({}, {}), expected (0, 0); {}", sample_file.string(),
                si[0], si[1], rebuild);
  // Each boundary (document position, offset) lies strictly after the previous
  // one and on a token of its document — or, for samples without the extra
  // token, possibly just past its last token (a sample that ends with it).
  for (std::int64_t b = 1; b <= samples; ++b) {
    const std::int64_t pos = si[2 * b], offset = si[2 * b + 1], prev_pos = si[2 * b - 2], prev_offset = si[2 * b - 1];
    TRIDENT_CHECK(prev_pos <= pos && pos < positions,
                  "index cache file '{}': sample boundary {} is at document position {}, expected in [{}, {}); {}",
                  sample_file.string(), b, pos, prev_pos, positions, rebuild);
    const std::int64_t length = sizes[static_cast<std::size_t>(ix.document_index[static_cast<std::size_t>(pos)])];
    TRIDENT_CHECK(0 <= offset && (offset < length || (!add_extra_token && offset == length)) &&
                      (pos > prev_pos || offset > prev_offset),
                  "index cache file '{}': sample boundary {} is at offset {} of a document of {} tokens, expected "
                  "a token of it after the previous boundary ({}, {}); {}",
                  sample_file.string(), b, offset, length, prev_pos, prev_offset, rebuild);
  }
  return ix;
}

// build_gpt_indices sees only document sizes; its errors (a split too small for
// one sample, say) must also say which dataset they are about.
GptIndices build_indices(const IndexedDataset& dataset, const GptDatasetConfig& c) {
  try {
    return build_gpt_indices(dataset.sequence_lengths(), c.documents, c.seq_len, c.num_samples, c.seed,
                             c.add_extra_token);
  } catch (const Error& e) {
    TRIDENT_FAIL("dataset '{}': {}", dataset.prefix(), e.message());
  }
}

}  // namespace

std::vector<std::int64_t> build_sample_index(std::span<const std::int32_t> sizes,
                                             std::span<const std::int32_t> document_index, std::int64_t seq_len,
                                             std::int64_t samples, bool add_extra_token) {
  const std::int64_t extra = add_extra_token ? 1 : 0;
  std::vector<std::int64_t> out(2 * static_cast<std::size_t>(samples + 1));
  std::size_t doc_pos = 0;
  std::int64_t doc_offset = 0;
  out[0] = 0;
  out[1] = 0;
  for (std::int64_t s = 1; s <= samples; ++s) {
    if (s % 4096 == 1) interruption_point(LongWait::index_cache);  // a signal abandons the build (nothing written)
    std::int64_t remaining = seq_len + extra;
    while (remaining != 0) {
      TRIDENT_CHECK(doc_pos < document_index.size(), "sample index: ran out of documents at sample {}", s);
      const std::int64_t doc_length = sizes[document_index[doc_pos]] - doc_offset;
      remaining -= doc_length;
      if (remaining <= 0) {
        // The sample ends inside this document; the next starts on its last token (with the extra
        // token) or just after it.
        doc_offset += remaining + doc_length - extra;
        remaining = 0;
      } else {
        ++doc_pos;
        doc_offset = 0;
      }
    }
    out[2 * s] = static_cast<std::int64_t>(doc_pos);
    out[2 * s + 1] = doc_offset;
  }
  return out;
}

GptIndices build_gpt_indices(std::span<const std::int32_t> sizes, DocumentRange documents, std::int64_t seq_len,
                             std::int64_t num_samples, std::uint64_t seed, bool add_extra_token) {
  const std::int64_t extra = add_extra_token ? 1 : 0;
  TRIDENT_CHECK(seq_len > 0, "seq_len {} must be positive", seq_len);
  TRIDENT_CHECK(num_samples >= 0, "num_samples {} is negative", num_samples);
  TRIDENT_CHECK(0 <= documents.begin && documents.begin <= documents.end &&
                    documents.end <= static_cast<std::int64_t>(sizes.size()),
                "document range [{}, {}) is not within the dataset's {} documents", documents.begin, documents.end,
                sizes.size());
  std::int64_t tokens_per_epoch = 0;
  for (std::int64_t d = documents.begin; d < documents.end; ++d) tokens_per_epoch += sizes[d];
  TRIDENT_CHECK(tokens_per_epoch >= seq_len + extra, "documents [{}, {}) hold {} tokens, too few for one sample of {}{}",
                documents.begin, documents.end, tokens_per_epoch, seq_len, add_extra_token ? " + 1" : "");
  std::int64_t epochs = 1;
  if (num_samples > 0) {
    const std::int64_t needed = num_samples * seq_len + extra;
    epochs = (needed + tokens_per_epoch - 1) / tokens_per_epoch;
    epochs = std::max<std::int64_t>(epochs, 1);
  }
  bool separate_final = false;
  std::int64_t samples_before_final = 0;
  if (epochs > 1 && num_samples > 0) {
    samples_before_final = ((epochs - 1) * tokens_per_epoch - extra) / seq_len;
    const std::int64_t from_final = num_samples - samples_before_final;
    const std::int64_t per_epoch = (tokens_per_epoch - extra) / seq_len;
    separate_final = from_final < static_cast<std::int64_t>(kFinalEpochThreshold * static_cast<double>(per_epoch));
  }
  const CounterRng rng(seed, "data/gpt");
  GptIndices ix;
  const std::int64_t n_docs = documents.size();
  ix.document_index.resize(static_cast<std::size_t>(epochs * n_docs));
  for (std::int64_t e = 0; e < epochs; ++e) {
    for (std::int64_t d = 0; d < n_docs; ++d) ix.document_index[e * n_docs + d] = static_cast<std::int32_t>(documents.begin + d);
  }
  std::span<std::int32_t> all(ix.document_index);
  if (separate_final) {
    shuffle(all.first(static_cast<std::size_t>((epochs - 1) * n_docs)), rng.derive("document_index"));
    shuffle(all.last(static_cast<std::size_t>(n_docs)), rng.derive("document_index/final_epoch"));
  } else {
    shuffle(all, rng.derive("document_index"));
  }
  interruption_point(LongWait::index_cache);
  const std::int64_t total_samples = (epochs * tokens_per_epoch - extra) / seq_len;
  ix.sample_index = build_sample_index(sizes, ix.document_index, seq_len, total_samples, add_extra_token);
  ix.shuffle_index.resize(static_cast<std::size_t>(total_samples));
  std::iota(ix.shuffle_index.begin(), ix.shuffle_index.end(), std::int64_t{0});
  std::span<std::int64_t> perm(ix.shuffle_index);
  if (separate_final) {
    shuffle(perm.first(static_cast<std::size_t>(samples_before_final)), rng.derive("shuffle_index"));
    shuffle(perm.subspan(static_cast<std::size_t>(samples_before_final)), rng.derive("shuffle_index/final_epoch"));
  } else {
    shuffle(perm, rng.derive("shuffle_index"));
  }
  return ix;
}

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> dataset, GptDatasetConfig config)
    : dataset_(std::move(dataset)), config_(std::move(config)) {
  TRIDENT_CHECK(dataset_ != nullptr, "GptDataset: no dataset");
  if (config_.documents.end < 0) config_.documents.end = static_cast<std::int64_t>(dataset_->size());
  const auto sizes = dataset_->sequence_lengths();
  if (config_.cache_dir.empty()) {
    indices_ = build_indices(*dataset_, config_);
    return;
  }
  // Non-overlapping samples add a line; the causal-LM description (and so its existing cache entries) is
  // unchanged.
  const std::string description = fmt::format(
      "trident GptDataset indices v1\nidx_xxh3={:016x}\nsequences={}\ndocuments=[{}, {})\nseq_len={}\n"
      "num_samples={}\nseed={}\n{}",
      dataset_->index_hash(), dataset_->size(), config_.documents.begin, config_.documents.end, config_.seq_len,
      config_.num_samples, config_.seed, config_.add_extra_token ? "" : "add_extra_token=false\n");
  const CacheEntry entry{config_.cache_dir,
                         fmt::format("gpt-{:016x}", XXH3_64bits(description.data(), description.size()))};
  std::filesystem::create_directories(entry.dir);
  FileLock lock(entry.file("lock"));
  // The description is written last: its presence marks a complete cache entry.
  if (std::filesystem::exists(entry.file("description.txt"))) {
    // The key is a hash of the description: the entry must describe these indices, not merely share it.
    const std::string cached = read_whole_file(entry.file("description.txt"), "index cache description");
    TRIDENT_CHECK(cached == description,
                  "index cache entry '{}' describes other indices than this dataset's (its dataset, documents, "
                  "seq_len, num_samples, seed or add_extra_token differ); delete {}-* to rebuild",
                  entry.file("description.txt").string(), (entry.dir / entry.key).string());
    indices_ = load_cached_indices(entry, sizes, config_.documents, config_.add_extra_token);
    return;
  }
  indices_ = build_indices(*dataset_, config_);
  const std::vector<std::int64_t> meta{static_cast<std::int64_t>(indices_.document_index.size()),
                                       static_cast<std::int64_t>(indices_.sample_index.size()),
                                       static_cast<std::int64_t>(indices_.shuffle_index.size())};
  write_file_atomically(entry.file("document_index.bin"), to_bytes(indices_.document_index));
  write_file_atomically(entry.file("sample_index.bin"), to_bytes(indices_.sample_index));
  write_file_atomically(entry.file("shuffle_index.bin"), to_bytes(indices_.shuffle_index));
  write_file_atomically(entry.file("sizes.bin"), to_bytes(meta));
  write_file_atomically(entry.file("description.txt"), description);
  built_cache_ = true;
}

void GptDataset::sample(std::int64_t i, std::int32_t* out) const {
  TRIDENT_CHECK(0 <= i && i < size(), "sample {} out of range (the dataset has {})", i, size());
  const std::int64_t j = indices_.shuffle_index[static_cast<std::size_t>(i)];
  const auto& si = indices_.sample_index;
  std::int64_t pos = si[2 * j], offset = si[2 * j + 1];
  const std::int64_t last_pos = si[2 * j + 2], last_offset = si[2 * j + 3];
  std::int64_t written = 0;
  const std::int64_t want = sample_tokens();
  const std::int64_t extra = config_.add_extra_token ? 1 : 0;
  // From (pos, offset) through (last_pos, last_offset): inclusive with the extra token, else exclusive.
  while (true) {
    const auto doc = static_cast<std::size_t>(indices_.document_index[static_cast<std::size_t>(pos)]);
    const std::int64_t end = pos == last_pos ? last_offset + extra : dataset_->sequence_lengths()[doc];
    const std::int64_t n = end - offset;
    // A real check, cheap per document: it keeps a bad index from writing past `out`.
    TRIDENT_CHECK(n <= want - written, "sample {} overflows its {} tokens (corrupt index?)", i, want);
    dataset_->read(doc, offset, n, out + written);
    written += n;
    if (pos == last_pos) break;
    ++pos;
    offset = 0;
  }
  TRIDENT_CHECK(written == want, "sample {} has {} tokens, expected {} (corrupt index cache?)", i, written, want);
}

}  // namespace trident::data
