// The BPE model: a vocabulary and ranked merges, applied to one pre-token at
// a time exactly as Hugging Face's `BPE` model does — repeatedly merge the
// adjacent pair with the lowest merge rank, the leftmost one on ties.
//
// Initial symbols are the pre-token's characters (for byte-level tokenizers,
// the byte-level characters of its bytes). A character missing from the
// vocabulary becomes <0xXX> byte tokens with byte_fallback, else the unknown
// token (consecutive ones fused with fuse_unk), else it is dropped.
// ignore_merges: a pre-token that is itself in the vocabulary maps to that id.
//
// Immutable after construction; safe to share between threads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace trident::data {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept;
};
using Vocab = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

// Token ids index dense tables, so a tokenizer.json claiming id 200,000,000 would
// allocate gigabytes: ids must be below 2^24 (real vocabularies stay under 2^18).
inline constexpr std::int32_t kMaxTokenId = 1 << 24;

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  BpeModel() = default;
  // `merges` in rank order (rank = position). Throws trident::Error naming
  // the merge when a part or the merged token is not in the vocabulary
  // (`where(i)` describes merge i for the message, e.g. "$.model.merges[7]"),
  // and naming both tokens and the id when two tokens share an id (decoding
  // that id would silently give the other token; Hugging Face accepts such a
  // file). `vocab_where` names the vocabulary for that message (e.g.
  // "tokenizer.json: $.model.vocab").
  BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
           const std::function<std::string(std::size_t)>& where = {}, std::string_view vocab_where = "vocabulary");

  // Encodes one pre-token. `raw` holds its bytes; when `byte_level`, the model
  // symbols are the byte-level characters of those bytes.
  void tokenize(std::string_view raw, bool byte_level, std::vector<std::int32_t>& out) const;

  const Vocab& vocab() const noexcept { return vocab_; }
  std::size_t merge_count() const noexcept { return merge_count_; }
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  // One past the largest id in the vocabulary.
  std::int32_t id_bound() const noexcept { return static_cast<std::int32_t>(id_to_token_.size()); }
  // The token of `id`, or nullptr when no token has that id.
  const std::string* id_to_token(std::int32_t id) const noexcept;
  const BpeOptions& options() const noexcept { return options_; }

 private:
  struct MergeValue {
    std::int32_t rank;
    std::int32_t new_id;
  };
  // Open-addressing map from (left id, right id) to the merge.
  struct MergeMap {
    std::vector<std::uint64_t> keys;  // kEmpty marks a free slot
    std::vector<MergeValue> values;
    std::uint64_t mask = 0;
    void build(const std::vector<std::pair<std::uint64_t, MergeValue>>& entries);
    const MergeValue* find(std::uint64_t key) const noexcept;
  };
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};

  void merge(std::vector<std::int32_t>& symbols, std::vector<std::int32_t>& out) const;
  void initial_symbols(std::string_view raw, bool byte_level, std::vector<std::int32_t>& symbols) const;

  Vocab vocab_;
  std::vector<std::string> id_to_token_;  // empty string: no token has this id
  std::vector<bool> has_id_;
  MergeMap merges_;
  std::size_t merge_count_ = 0;
  BpeOptions options_;
  std::int32_t unk_id_ = -1;
  std::int32_t byte_ids_[256];            // id of the byte-level character of each byte, -1 if absent
  std::int32_t byte_fallback_ids_[256];   // id of "<0xXX>", -1 if absent
};

}  // namespace trident::data
