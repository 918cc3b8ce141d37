// What the GPT-2-shaped families share (GPT-2, BERT): multi-head attention (as many key/value heads as
// heads), a 4·d_model feed-forward and tied embeddings. A family built on it starts from
// gpt_like_spec() and sets its vocabulary, context, norm and biases.
#pragma once

#include <cstdint>
#include <string>

#include "trident/models/spec.h"

namespace trident::models {

inline TransformerSpec gpt_like_spec(const std::string& family, std::int64_t L, std::int64_t H, std::int64_t D) {
  TransformerSpec s;
  s.family = family;
  s.n_layer = L;
  s.n_head = s.n_kv_head = H;
  s.d_model = D;
  s.d_ff = 4 * D;
  s.tie_embeddings = true;
  return s;
}

}  // namespace trident::models
