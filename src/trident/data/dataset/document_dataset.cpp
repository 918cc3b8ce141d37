#include "trident/data/dataset/document_dataset.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <string>

#include "trident/core/error.h"
#include "trident/core/rng.h"
#include "trident/data/dataset/shuffle.h"

namespace trident::data {

DocumentDataset::DocumentDataset(std::shared_ptr<const IndexedDataset> dataset, DocumentDatasetConfig config)
    : dataset_(std::move(dataset)), config_(config) {
  TRIDENT_CHECK(dataset_ != nullptr, "DocumentDataset: no dataset");
  const auto n = static_cast<std::int64_t>(dataset_->size());
  if (config_.documents.end < 0) config_.documents.end = n;
  const DocumentRange r = config_.documents;
  TRIDENT_CHECK(0 <= r.begin && r.begin < r.end && r.end <= n,
                "dataset '{}': document range [{}, {}) holds no documents of the dataset's {}", dataset_->prefix(),
                r.begin, r.end, n);
  TRIDENT_CHECK(config_.sample_tokens >= 1, "dataset '{}': samples of {} tokens (expected at least 1)",
                dataset_->prefix(), config_.sample_tokens);
  TRIDENT_CHECK(0 <= config_.keep_last && config_.keep_last < config_.sample_tokens,
                "dataset '{}': keep_last {} must be in [0, the sample's {} tokens)", dataset_->prefix(),
                config_.keep_last, config_.sample_tokens);
  TRIDENT_CHECK(config_.num_samples >= 0, "dataset '{}': num_samples {} is negative", dataset_->prefix(),
                config_.num_samples);
  const std::int64_t docs = r.size();
  const std::int64_t samples = config_.num_samples > 0 ? config_.num_samples : docs;
  const CounterRng rng(config_.seed, "data/documents");
  std::vector<std::int32_t> epoch(static_cast<std::size_t>(docs));
  order_.reserve(static_cast<std::size_t>(samples));
  for (std::int64_t e = 0; static_cast<std::int64_t>(order_.size()) < samples; ++e) {
    std::iota(epoch.begin(), epoch.end(), static_cast<std::int32_t>(r.begin));
    shuffle(std::span<std::int32_t>(epoch), rng.derive(std::to_string(e)));
    const std::int64_t take = std::min(docs, samples - static_cast<std::int64_t>(order_.size()));
    order_.insert(order_.end(), epoch.begin(), epoch.begin() + take);
  }
}

std::int64_t DocumentDataset::length(std::int64_t i) const {
  TRIDENT_CHECK(0 <= i && i < size(), "sample {} out of range (the dataset has {})", i, size());
  const auto doc = static_cast<std::size_t>(order_[static_cast<std::size_t>(i)]);
  return std::min<std::int64_t>(dataset_->sequence_lengths()[doc], config_.sample_tokens);
}

void DocumentDataset::sample(std::int64_t i, std::int32_t* out) const {
  const std::int64_t n = length(i), t = config_.sample_tokens;
  const auto doc = static_cast<std::size_t>(order_[static_cast<std::size_t>(i)]);
  const std::int64_t doc_length = dataset_->sequence_lengths()[doc];
  if (doc_length <= t) {
    dataset_->read(doc, 0, n, out);
  } else {  // truncated: the head, then the closing keep_last tokens
    const std::int64_t head = t - config_.keep_last;
    dataset_->read(doc, 0, head, out);
    dataset_->read(doc, doc_length - config_.keep_last, config_.keep_last, out + head);
  }
  std::fill(out + n, out + t, config_.pad_id);
}

std::span<const std::string_view> padding_names() noexcept {
  static constexpr std::array<std::string_view, 4> kNames = {"[PAD]", "<pad>", "<|pad|>", "<|padding|>"};
  return kNames;
}

std::optional<std::int32_t> padding_id(const Tokenizer& tokenizer) {
  for (std::string_view name : padding_names()) {
    if (auto id = tokenizer.token_to_id(name)) return id;
  }
  return tokenizer.eod_id();
}

}  // namespace trident::data
