// Helpers shared by the data tests: error capture and a small tokenizer (and testing/helpers.h's TempDir).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "testing/helpers.h"
#include "trident/core/error.h"
#include "trident/data/tokenizer/bpe_trainer.h"
#include "trident/data/tokenizer/tokenizer.h"

namespace trident::testing {

// The message of the trident::Error `f` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  return thrown(f, "(no error)", [](const Error& e) { return e.message(); });
}

// A byte-level BPE of 300 tokens with <|endoftext|>, trained on `text` (a pair seen once is merged too).
inline data::Tokenizer small_bpe(std::string_view text) {
  data::BpeTrainerOptions o;
  o.vocab_size = 300;
  o.special_tokens = {"<|endoftext|>"};
  o.min_frequency = 1;
  data::BpeTrainer t(o);
  t.feed(text);
  return data::Tokenizer::from_json(data::tokenizer_json(t.train()));
}

}  // namespace trident::testing
