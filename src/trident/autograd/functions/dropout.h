// Differentiable dropout with a counter-based mask (see ops/dropout.h).
#pragma once

#include "trident/autograd/variable.h"
#include "trident/core/rng.h"

namespace trident::autograd {

// The node saves only (p, rng, slice): backward regenerates the mask instead of
// keeping one. p == 0 returns x itself (nothing recorded).
Variable dropout(const Variable& x, double p, const CounterRng& rng, const GlobalSlice& slice = {});

}  // namespace trident::autograd
