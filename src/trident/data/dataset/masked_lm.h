// Masked-LM (BERT) masking, as transformers' DataCollatorForLanguageModeling
// (mlm_probability p) and, optionally, DataCollatorForWholeWordMask do it, with
// every random draw from trident's counter-based RNG (docs/data.md,
// "Masked-LM samples and masking").
//
// The API:
//
//   struct MaskingOptions { probability, mask_ratio, random_ratio, mask_token_id, vocab_size,
//                           special_ids, whole_word, continuation, seed };
//   MaskingOptions masking_for_tokenizer(const Tokenizer&, double probability = 0.15,
//                                        bool whole_word = false, std::uint64_t seed = 1234);
//   void check_masking_options(const MaskingOptions&);
//   std::int64_t mask_sample(const MaskingOptions&, std::int64_t global_sample,
//                            std::span<const std::int32_t> tokens,
//                            std::span<std::int64_t> inputs, std::span<std::int64_t> labels);
//   std::int64_t count_masked(const MaskingOptions&, std::int64_t global_sample,
//                             std::span<const std::int32_t> tokens);
//
// and, in loader.h, LoaderOptions::masking (std::optional<MaskingOptions>) and
// trained_labels(source, order, first, count, const MaskingOptions&) — or the
// overload taking the LoaderOptions, which picks the rule they set.
//
// The rule, for one sample of T tokens (a window of exactly seq_len tokens:
// GptDatasetConfig::add_extra_token = false over documents that
// `trident preprocess --encoder` framed as [CLS] doc [SEP]):
//  - a position whose token is in special_ids is never selected (transformers
//    masks out tokenizer.all_special_ids: [CLS] [SEP] [PAD] [MASK] [UNK]);
//  - every other position is selected independently with probability
//    `probability` — or, with whole_word, every *word* is: a word is a token
//    that is not a continuation plus the continuation tokens ("##...") that
//    follow it; a continuation at position 0 or after a special token starts a
//    word of its own (as in DataCollatorForWholeWordMask). So the expected
//    fraction of selected non-special tokens is `probability` in both modes
//    (whole_word draws per word rather than transformers' fixed count of
//    round(p·tokens) shuffled words);
//  - a selected position's input becomes mask_token_id with probability
//    mask_ratio, a uniformly random id in [0, vocab_size) with probability
//    random_ratio, and stays unchanged otherwise (80/10/10), each selected
//    position on its own draws (whole words included, as in transformers);
//  - labels: the original id at selected positions, kIgnoreLabel (−100,
//    loader.h) everywhere else.
//
// RNG coordinates: position t of global sample k (its index in the loader's
// endless stream — not the source's index, so each epoch masks anew, like
// transformers' dynamic masking) uses the Philox block k·T + t of
// CounterRng(seed, "data/masked_lm"): word 0 decides the selection (for a
// whole word, word 0 of the word's first position), word 1 the 80/10/10
// replacement, word 2 the random id (floor(bits · vocab_size / 2^32)). The
// masks are therefore a pure function of (seed, k, the sample's tokens): any
// data-parallel size, rank or micro-batch size masks the same tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "trident/data/tokenizer/tokenizer.h"

namespace trident::data {

struct MaskingOptions {
  double probability = 0.15;  // transformers' mlm_probability
  double mask_ratio = 0.8;    // of the selected: replaced by mask_token_id
  double random_ratio = 0.1;  // of the selected: replaced by a random id; the rest (0.1) unchanged
  std::int32_t mask_token_id = -1;
  std::int32_t vocab_size = 0;             // random ids are drawn from [0, vocab_size); tokens must lie there
  std::vector<std::int32_t> special_ids;   // never selected
  bool whole_word = false;                 // select whole words (needs `continuation`)
  std::vector<std::uint8_t> continuation;  // per id (vocab_size entries): 1 = continues the previous token's word
  std::uint64_t seed = 1234;
};

// The options for `tokenizer`: its mask token ("[MASK]", else RoBERTa's
// "<mask>"; an error naming both when it has neither), vocab_size(), every
// special token (plus the template's tokens and the mask token) and, for
// whole_word, the continuation flags: a non-special id whose token starts with
// the WordPiece model's continuing_subword_prefix ("##"); whole_word with a
// tokenizer that is not WordPiece is an error. The ratios are 0.8 / 0.1 / 0.1.
MaskingOptions masking_for_tokenizer(const Tokenizer& tokenizer, double probability = 0.15, bool whole_word = false,
                                     std::uint64_t seed = 1234);

// Throws trident::Error naming the field when the options are inconsistent
// (probability or ratios outside [0, 1], no mask token, ids outside the
// vocabulary, a continuation table of the wrong size).
void check_masking_options(const MaskingOptions& options);

// Masks one sample (see above). `inputs` and `labels` have tokens.size()
// entries. Returns the number of selected positions (labels that are not
// kIgnoreLabel). A token outside [0, vocab_size) is an error. The options are
// assumed checked (check_masking_options). `length` >= 0: only the first
// `length` tokens are real (a padded sample, DocumentDataset); the padding
// after them is never selected, keeps its ids and has ignored labels. The
// RNG coordinates stay k·T + t with T = tokens.size().
std::int64_t mask_sample(const MaskingOptions& options, std::int64_t global_sample,
                         std::span<const std::int32_t> tokens, std::span<std::int64_t> inputs,
                         std::span<std::int64_t> labels, std::int64_t length = -1);

// The number mask_sample would return, without writing anything.
std::int64_t count_masked(const MaskingOptions& options, std::int64_t global_sample,
                          std::span<const std::int32_t> tokens, std::int64_t length = -1);

}  // namespace trident::data
