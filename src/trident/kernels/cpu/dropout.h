// CPU dropout kernel driven by the counter-based RNG (core/rng.h).
//
// The local tensor x has shape `local` (contiguous, `dtype`) and sits at
// `slice` inside its logical tensor (an empty slice: x is the whole tensor).
// The element at global row-major index g is dropped iff rng.uniform(g) < p;
// kept elements are multiplied by 1 / (1 - p) (in acc_t, rounded once). The
// mask is a pure function of (rng, g), so it is regenerated rather than stored,
// and a shard draws exactly the mask of the same region of the whole tensor.
// Arguments are validated by ops:: (0 <= p < 1, slice consistent with local).
#pragma once

#include <cstdint>

#include "trident/core/dtype.h"
#include "trident/core/rng.h"
#include "trident/core/shape.h"
#include "trident/kernels/dropout_rule.h"

namespace trident::kernels::cpu {
#include "trident/kernels/dropout.h"

// What attention's probability dropout (kernels/cpu/attention_tiles.h) shares with `dropout`:
// keep[j] = rule.scale (in A) for a kept element, 0 for a dropped one, for the elements at global
// indices first + j, j < n, of rng's stream: bit for bit the mask `dropout` draws. A = float or double.
template <typename A>
void dropout_keep_factors(const CounterRng& rng, std::uint64_t first, std::int64_t n, const DropRule& rule, A* keep);
}  // namespace trident::kernels::cpu
