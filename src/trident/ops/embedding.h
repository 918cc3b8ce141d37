// Embedding lookup and its gradient.
//
// weight [V, D] (f32, f64, bf16, f16); ids of any shape [...] (i32 or i64),
// every id in [0, V) — an id outside is an error naming the id, its position
// and V.
#pragma once

#include <cstdint>

#include "trident/core/tensor.h"

namespace trident::ops {

// out[..., :] = weight[ids[...], :]; shape [..., D], weight's dtype. `vocab` (0 < vocab <= V), when
// given, bounds the ids instead of V: a table padded past its vocabulary (nn::Embedding) refuses ids
// that would read a padding row.
Tensor embedding(const Tensor& weight, const Tensor& ids, std::int64_t vocab = 0);

// dweight [vocab, D] in dout's dtype: row v is the sum of the dout rows whose id
// is v (in token order, accumulated in f32 for bf16/f16), zero for unused rows.
// dout has shape [..., D] with ids of shape [...]. Deterministic for any thread count.
Tensor embedding_backward(const Tensor& dout, const Tensor& ids, std::int64_t vocab);

// The same into an existing gradient buffer dweight [vocab, D] of dout's dtype,
// or f32 for bf16/f16 dout (an f32 master weight's gradient): accumulate adds
// each used row's sum in dweight's dtype and leaves the other rows untouched;
// otherwise dweight is overwritten as above.
void embedding_backward_into(const Tensor& dout, const Tensor& ids, Tensor& dweight, bool accumulate);

}  // namespace trident::ops
