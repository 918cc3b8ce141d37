// Differentiable scaled-dot-product attention (see ops/attention.h for shapes,
// dtypes and the mask/causal rules).
#pragma once

#include "trident/autograd/variable.h"
#include "trident/ops/attention.h"

namespace trident::autograd {

// out [B, T, H, D] from q [B, T, H, D], k and v [B, S, Hkv, D]. Saves q, k, v,
// out and the row log-sum-exp (B·H·T values) for the backward pass, which
// recomputes the scores block by block with the same options (causal, scale,
// sliding window, key padding), so gradients flow only through the visible
// keys; options.mask and options.key_mask are constants (no gradient), held by
// the backward closure with the rest of the options, which include the dropout
// (its mask regenerated from the same generator, never saved).
Variable attention(const Variable& q, const Variable& k, const Variable& v, const ops::AttentionOptions& options = {});

}  // namespace trident::autograd
