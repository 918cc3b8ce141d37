#include "trident/data/dataset/blended_dataset.h"

#include <cmath>

#include "trident/core/error.h"
#include "trident/core/interrupt.h"

namespace trident::data {

BlendIndex build_blending_indices(std::span<const double> weights, std::int64_t size) {
  TRIDENT_CHECK(!weights.empty(), "blending needs at least one weight");
  TRIDENT_CHECK(size >= 0, "blend size {} is negative", size);
  double total = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    TRIDENT_CHECK(std::isfinite(weights[i]) && weights[i] >= 0, "blend weight {} is {}, expected >= 0", i, weights[i]);
    total += weights[i];
  }
  TRIDENT_CHECK(total > 0, "blend weights sum to 0");
  std::vector<double> w(weights.begin(), weights.end());
  for (double& x : w) x /= total;
  std::vector<std::int64_t> count(w.size(), 0);
  BlendIndex out;
  out.dataset.resize(static_cast<std::size_t>(size));
  out.dataset_sample.resize(static_cast<std::size_t>(size));
  for (std::int64_t s = 0; s < size; ++s) {
    if (s % 4096 == 0) interruption_point(LongWait::index_cache);  // a signal abandons the build
    const double progress = static_cast<double>(std::max<std::int64_t>(s, 1));
    std::size_t best = 0;
    double best_error = w[0] * progress - static_cast<double>(count[0]);
    for (std::size_t i = 1; i < w.size(); ++i) {
      const double e = w[i] * progress - static_cast<double>(count[i]);
      if (e > best_error) {
        best_error = e;
        best = i;
      }
    }
    out.dataset[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(best);
    out.dataset_sample[static_cast<std::size_t>(s)] = count[best]++;
  }
  return out;
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const SampleSource>> sources, std::vector<double> weights,
                               std::int64_t size)
    : sources_(std::move(sources)) {
  TRIDENT_CHECK(!sources_.empty(), "BlendedDataset: no datasets");
  if (weights.empty()) {
    for (const auto& s : sources_) weights.push_back(static_cast<double>(s->size()));
  }
  TRIDENT_CHECK(weights.size() == sources_.size(), "BlendedDataset: {} weights for {} datasets", weights.size(),
                sources_.size());
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    TRIDENT_CHECK(sources_[i]->sample_tokens() == sources_.front()->sample_tokens(),
                  "BlendedDataset: dataset {} has samples of {} tokens, dataset 0 of {}", i,
                  sources_[i]->sample_tokens(), sources_.front()->sample_tokens());
    TRIDENT_CHECK(sources_[i]->padded() == sources_.front()->padded(),
                  "BlendedDataset: dataset {} is {}, dataset 0 {}", i,
                  sources_[i]->padded() ? "padded" : "packed", sources_.front()->padded() ? "padded" : "packed");
  }
  index_ = build_blending_indices(weights, size);
  std::vector<std::int64_t> need(sources_.size(), 0);
  for (std::size_t s = 0; s < index_.dataset.size(); ++s) {
    need[index_.dataset[s]] = std::max(need[index_.dataset[s]], index_.dataset_sample[s] + 1);
  }
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    TRIDENT_CHECK(need[i] <= sources_[i]->size(),
                  "BlendedDataset: a blend of {} samples draws {} from dataset {}, which has only {} (build it with "
                  "more samples)", size, need[i], i, sources_[i]->size());
  }
}

void BlendedDataset::sample(std::int64_t i, std::int32_t* out) const {
  TRIDENT_CHECK(0 <= i && i < size(), "sample {} out of range (the blend has {})", i, size());
  const auto s = static_cast<std::size_t>(i);
  sources_[index_.dataset[s]]->sample(index_.dataset_sample[s], out);
}

std::int64_t BlendedDataset::length(std::int64_t i) const {
  TRIDENT_CHECK(0 <= i && i < size(), "sample {} out of range (the blend has {})", i, size());
  const auto s = static_cast<std::size_t>(i);
  return sources_[index_.dataset[s]]->length(index_.dataset_sample[s]);
}

}  // namespace trident::data
