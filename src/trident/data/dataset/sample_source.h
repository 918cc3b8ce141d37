// The interface the loader reads: a finite, random-access set of fixed-length
// training samples (GptDataset, DocumentDataset, BlendedDataset).
#pragma once

#include <cstdint>
#include <vector>

namespace trident::data {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual std::int64_t size() const = 0;
  // Tokens per sample (seq_len + 1: inputs are [0, seq_len), labels [1, seq_len]).
  virtual std::int64_t sample_tokens() const = 0;
  // Writes sample `i` (0 <= i < size()) to out[0, sample_tokens()). Thread-safe.
  virtual void sample(std::int64_t i, std::int32_t* out) const = 0;
  // The real tokens at the start of sample `i`; the rest of its sample_tokens() are padding. A packed
  // source (windows that run across documents) has no padding.
  virtual std::int64_t length(std::int64_t i) const {
    (void)i;
    return sample_tokens();
  }
  // Whether samples may end in padding (one document per sample), so that the loader gives each batch
  // an attention mask and ignores the labels there.
  virtual bool padded() const { return false; }

  std::vector<std::int32_t> sample(std::int64_t i) const {
    std::vector<std::int32_t> out(static_cast<std::size_t>(sample_tokens()));
    sample(i, out.data());
    return out;
  }
};

}  // namespace trident::data
