// Dropout with a counter-based mask (no mask tensor is stored).
//
// The element of x at global row-major index g — its index inside
// slice.global_shape at slice.offsets, or its own index when `slice` is empty —
// is dropped iff rng.uniform(g) < p; kept elements are scaled by 1 / (1 - p).
// Because the mask depends only on (rng, g), a tensor-, sequence- or
// data-parallel shard drops exactly the elements the unsharded tensor would
// (docs/numerics.md#counter-based-randomness), and backward regenerates the mask from the same arguments.
// Callers derive a fresh stream per use, e.g. rng.derive("layer3/attn/mb7").
//
// p must be in [0, 1). dtypes: f32, f64, bf16, f16 (scaling in f32 for the
// 16-bit types). p == 0 returns x itself (no copy, like ops::cast).
#pragma once

#include "trident/core/rng.h"
#include "trident/core/tensor.h"

namespace trident::ops {

Tensor dropout(const Tensor& x, double p, const CounterRng& rng, const GlobalSlice& slice = {});
// dx = dy masked and scaled exactly as the forward with the same (p, rng, slice).
Tensor dropout_backward(const Tensor& dy, double p, const CounterRng& rng, const GlobalSlice& slice = {});

}  // namespace trident::ops
