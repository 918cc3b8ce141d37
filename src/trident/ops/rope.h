// Rotary position embedding (RoPE), in Hugging Face LLaMA's convention
// (rotate_half): within each head, element i < D/2 pairs with element i + D/2,
// and the pair is rotated by angle = position · theta^(−2i/D), or by the
// rescaled frequency of `freq.scaling` (kernels/rope_frequencies.h).
//
// x is [B, T, H, D] (the layout attention takes) with D even, of dtype f32,
// f64, bf16 or f16 (bf16/f16 computed in f32); the result has x's shape and
// dtype. Angles and their cos/sin are computed in f64 for every dtype.
#pragma once

#include <cstdint>

#include "trident/core/tensor.h"
#include "trident/kernels/rope_frequencies.h"

namespace trident::ops {

// Row t of every batch is at position position_offset + t (the offset is the
// KV-cache length during generation).
Tensor rope(const Tensor& x, std::int64_t position_offset, const RopeFrequencies& freq = {});
// Explicit positions: an integer tensor [T] (i64 or i32), or [B, T] for positions of each sample's own
// (packed documents whose positions restart at each).
Tensor rope(const Tensor& x, const Tensor& positions, const RopeFrequencies& freq = {});

// The gradient of rope: dy rotated by −angle (a rotation's transpose is its inverse).
Tensor rope_backward(const Tensor& dy, std::int64_t position_offset, const RopeFrequencies& freq = {});
Tensor rope_backward(const Tensor& dy, const Tensor& positions, const RopeFrequencies& freq = {});

}  // namespace trident::ops
