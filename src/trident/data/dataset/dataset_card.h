// A dataset's card: PREFIX.card.json, written by `trident preprocess` beside PREFIX.bin/.idx (whose format stays
// Megatron's), records how the documents were made, so that training can refuse a dataset that does not fit
// the model or the tokenizer instead of learning from it: documents framed for a masked LM ([CLS] doc [SEP],
// `--encoder`) or not, and the tokenizer whose ids they hold, by a fingerprint of its vocabulary (two
// tokenizers of one size but other tokens differ). Datasets made by other tools have no card and are not
// checked (docs/data.md, "The dataset card").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trident/data/tokenizer/tokenizer.h"

namespace trident::data {

struct DatasetCard {
  bool encoder = false;            // every document framed by the tokenizer's template (preprocess --encoder)
  bool append_eod = false;         // every document ends with an end-of-document token
  bool special_tokens = true;      // the tokenizer's template tokens were added (--no-special-tokens: false)
  std::string tokenizer;           // the tokenizer it was made with, as given to preprocess (for messages)
  std::int64_t vocab_size = 0;     // its tokens
  std::string tokenizer_fingerprint;  // tokenizer_fingerprint()
  std::uint64_t documents = 0;     // what PREFIX.idx holds when the card was written
  std::uint64_t tokens = 0;
};

// A fingerprint of what the tokenizer's ids mean: every id's token and the single-sequence template's ids
// (16 hexadecimal digits). Equal for the same vocabulary however its file is written.
std::string tokenizer_fingerprint(const Tokenizer& tokenizer);

// PREFIX.card.json.
std::string dataset_card_path(const std::string& prefix);

// Writes PREFIX.card.json atomically.
void write_dataset_card(const std::string& prefix, const DatasetCard& card);

// PREFIX.card.json, or nullopt when there is none. A damaged card is an error naming the file and key.
std::optional<DatasetCard> read_dataset_card(const std::string& prefix);

}  // namespace trident::data
