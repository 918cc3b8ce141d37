#include "trident/data/dataset/masked_lm.h"

#include <algorithm>
#include <array>
#include <optional>

#include "trident/core/error.h"
#include "trident/core/rng.h"
#include "trident/data/dataset/loader.h"

namespace trident::data {
namespace {

constexpr std::string_view kStream = "data/masked_lm";

double unit(std::uint32_t bits) { return (static_cast<double>(bits) + 0.5) * 0x1p-32; }

// The one implementation behind mask_sample and count_masked (inputs/labels null: count only).
std::int64_t apply(const MaskingOptions& o, std::int64_t global_sample, std::span<const std::int32_t> tokens,
                   std::int64_t real, std::int64_t* inputs, std::int64_t* labels) {
  TRIDENT_CHECK(global_sample >= 0, "masked LM: negative global sample index {}", global_sample);
  const auto size = static_cast<std::int64_t>(tokens.size());
  if (real < 0) real = size;
  TRIDENT_CHECK(real <= size, "masked LM: global sample {} has {} real tokens of {}", global_sample, real, size);
  const CounterRng rng(o.seed, kStream);
  const auto length = static_cast<std::uint64_t>(tokens.size());
  const std::uint64_t base = static_cast<std::uint64_t>(global_sample) * length;
  const double keep_from = o.mask_ratio + o.random_ratio;
  std::int64_t selected_count = 0;
  bool word_selected = false;
  bool after_special = true;  // position 0 starts a word whatever its token
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const std::int32_t id = tokens[t];
    TRIDENT_CHECK(0 <= id && id < o.vocab_size,
                  "masked LM: global sample {} holds token id {} at position {}, outside the vocabulary [0, {})",
                  global_sample, id, t, o.vocab_size);
    bool selected = false;
    std::array<std::uint32_t, 4> draws{};
    const bool padding = static_cast<std::int64_t>(t) >= real;  // never selected
    if (!padding && std::find(o.special_ids.begin(), o.special_ids.end(), id) != o.special_ids.end()) {
      after_special = true;
    } else if (!padding) {
      draws = rng.block(base + t);
      const bool starts_word = !o.whole_word || after_special || o.continuation[static_cast<std::size_t>(id)] == 0;
      if (starts_word) word_selected = unit(draws[0]) < o.probability;
      selected = word_selected;
      after_special = false;
    }
    if (selected) ++selected_count;
    if (inputs == nullptr) continue;
    if (!selected) {
      inputs[t] = id;
      labels[t] = kIgnoreLabel;
      continue;
    }
    labels[t] = id;
    const double r = unit(draws[1]);
    if (r < o.mask_ratio) {
      inputs[t] = o.mask_token_id;
    } else if (r < keep_from) {
      inputs[t] = static_cast<std::int64_t>((static_cast<std::uint64_t>(draws[2]) *
                                             static_cast<std::uint64_t>(o.vocab_size)) >> 32);
    } else {
      inputs[t] = id;
    }
  }
  return selected_count;
}

}  // namespace

void check_masking_options(const MaskingOptions& o) {
  TRIDENT_CHECK(0 <= o.probability && o.probability <= 1, "masked LM: probability {} is not in [0, 1]",
                o.probability);
  TRIDENT_CHECK(0 <= o.mask_ratio && 0 <= o.random_ratio && o.mask_ratio + o.random_ratio <= 1 + 1e-12,
                "masked LM: mask_ratio {} and random_ratio {} must be non-negative with a sum of at most 1 (the rest "
                "is kept unchanged)",
                o.mask_ratio, o.random_ratio);
  TRIDENT_CHECK(o.vocab_size > 0, "masked LM: vocab_size {} must be positive", o.vocab_size);
  TRIDENT_CHECK(0 <= o.mask_token_id && o.mask_token_id < o.vocab_size,
                "masked LM: mask_token_id {} is not an id of the vocabulary [0, {})", o.mask_token_id, o.vocab_size);
  for (std::int32_t id : o.special_ids) {
    TRIDENT_CHECK(0 <= id && id < o.vocab_size, "masked LM: special id {} is not in the vocabulary [0, {})", id,
                  o.vocab_size);
  }
  if (o.whole_word) {
    TRIDENT_CHECK(o.continuation.size() == static_cast<std::size_t>(o.vocab_size),
                  "masked LM: whole-word masking needs a continuation flag per id ({}), got {}", o.vocab_size,
                  o.continuation.size());
  }
}

MaskingOptions masking_for_tokenizer(const Tokenizer& tokenizer, double probability, bool whole_word,
                                     std::uint64_t seed) {
  MaskingOptions o;
  o.probability = probability;
  o.seed = seed;
  o.whole_word = whole_word;
  o.vocab_size = tokenizer.vocab_size();
  std::optional<std::int32_t> mask = tokenizer.token_to_id("[MASK]");
  if (!mask) mask = tokenizer.token_to_id("<mask>");
  TRIDENT_CHECK(mask.has_value(),
                "masked LM: the tokenizer has no mask token: expected [MASK] (BERT's vocab.txt or tokenizer.json) "
                "or <mask> (RoBERTa's tokenizer.json) in its vocabulary");
  o.mask_token_id = *mask;
  const TokenizerParts& parts = tokenizer.parts();
  for (const AddedToken& t : parts.added.tokens()) {
    if (t.special && t.id >= 0) o.special_ids.push_back(t.id);
  }
  o.special_ids.push_back(*mask);
  o.special_ids.insert(o.special_ids.end(), parts.prefix_ids.begin(), parts.prefix_ids.end());
  o.special_ids.insert(o.special_ids.end(), parts.suffix_ids.begin(), parts.suffix_ids.end());
  std::sort(o.special_ids.begin(), o.special_ids.end());
  o.special_ids.erase(std::unique(o.special_ids.begin(), o.special_ids.end()), o.special_ids.end());
  if (whole_word) {
    const WordPieceModel* wordpiece = parts.model.wordpiece();
    TRIDENT_CHECK(wordpiece != nullptr,
                  "masked LM: whole-word masking needs a WordPiece tokenizer (a word is a token and the \"##\" "
                  "tokens after it); this one is BPE");
    const std::string& prefix = wordpiece->options().continuing_subword_prefix;
    o.continuation.assign(static_cast<std::size_t>(o.vocab_size), 0);
    for (std::int32_t id = 0; id < o.vocab_size; ++id) {
      if (tokenizer.is_special(id)) continue;
      const auto token = tokenizer.id_to_token(id);
      if (token && !prefix.empty() && token->starts_with(prefix)) o.continuation[static_cast<std::size_t>(id)] = 1;
    }
  }
  check_masking_options(o);
  return o;
}

std::int64_t mask_sample(const MaskingOptions& options, std::int64_t global_sample,
                         std::span<const std::int32_t> tokens, std::span<std::int64_t> inputs,
                         std::span<std::int64_t> labels, std::int64_t length) {
  TRIDENT_CHECK(inputs.size() == tokens.size() && labels.size() == tokens.size(),
                "masked LM: {} tokens but {} inputs and {} labels to write", tokens.size(), inputs.size(),
                labels.size());
  return apply(options, global_sample, tokens, length, inputs.data(), labels.data());
}

std::int64_t count_masked(const MaskingOptions& options, std::int64_t global_sample,
                          std::span<const std::int32_t> tokens, std::int64_t length) {
  return apply(options, global_sample, tokens, length, nullptr, nullptr);
}

}  // namespace trident::data
