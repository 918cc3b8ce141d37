// Next-token sampling for generation: greedy, temperature, top-k, top-p
// (nucleus) and n-gram blocking, as a pure function of the logits, the
// history and a counter-based random draw (so a seed reproduces a sample).
#pragma once

#include <cstdint>
#include <vector>

#include "trident/core/rng.h"

namespace trident::models {

struct SamplingOptions {
  double temperature = 1.0;       // 0 = greedy
  std::int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;             // 1 = off
  std::int64_t no_repeat_ngram = 0;  // n > 0: never complete an n-gram already in the sequence
  std::uint64_t seed = 0;
};

// Tokens that would complete an n-gram already present in `history`
// (oslo's / Hugging Face's no_repeat_ngram_size rule).
std::vector<std::int64_t> banned_tokens(const std::vector<std::int64_t>& history, std::int64_t n);

// Picks the next token from `logits` (vocabulary-sized). `draw_index` selects
// the random number (use the position being generated).
std::int64_t sample_next(const std::vector<float>& logits, const std::vector<std::int64_t>& history,
                         const SamplingOptions& options, std::uint64_t draw_index);

}  // namespace trident::models
