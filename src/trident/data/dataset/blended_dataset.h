// Weighted blending of several sample sources (Megatron's BlendedDataset,
// oslo's DatasetBlender), with Megatron's greedy build_blending_indices:
// for sample s, pick the dataset i with the largest w_i * max(s, 1) - count_i
// (the first on ties), record (i, count_i), increment count_i. The blend
// follows the weights as closely as any prefix can, deterministically.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "trident/data/dataset/sample_source.h"

namespace trident::data {

struct BlendIndex {
  std::vector<std::int32_t> dataset;         // which dataset sample s comes from
  std::vector<std::int64_t> dataset_sample;  // its index within that dataset
};

// Weights need not sum to 1 (they are normalised); all must be >= 0, one > 0.
BlendIndex build_blending_indices(std::span<const double> weights, std::int64_t size);

class BlendedDataset final : public SampleSource {
 public:
  // `weights` empty: proportional to the sources' sizes (oslo's default).
  // Throws if a source has fewer samples than the blend draws from it, or if
  // the sources' sample lengths (or their padding) differ.
  BlendedDataset(std::vector<std::shared_ptr<const SampleSource>> sources, std::vector<double> weights,
                 std::int64_t size);

  std::int64_t size() const override { return static_cast<std::int64_t>(index_.dataset.size()); }
  std::int64_t sample_tokens() const override { return sources_.front()->sample_tokens(); }
  void sample(std::int64_t i, std::int32_t* out) const override;
  using SampleSource::sample;
  std::int64_t length(std::int64_t i) const override;
  bool padded() const override { return sources_.front()->padded(); }

  const BlendIndex& index() const noexcept { return index_; }

 private:
  std::vector<std::shared_ptr<const SampleSource>> sources_;
  BlendIndex index_;
};

}  // namespace trident::data
