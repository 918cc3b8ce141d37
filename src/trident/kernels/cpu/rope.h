// CPU rotary position embedding (Hugging Face LLaMA's rotate_half convention).
//
// x and out are contiguous [B, T, H, D] of one floating dtype, D even; positions
// holds T integer positions (row t of every batch uses positions[t]). Element i
// < D/2 of a head is paired with element i + D/2 and the pair is rotated by
// angle = positions[t] · freq.inv_freq(i, D) (kernels/rope_frequencies.h):
//   out[i]       = x[i] · cos − x[i + D/2] · sin
//   out[i + D/2] = x[i + D/2] · cos + x[i] · sin
// `inverse` rotates by −angle instead (the backward pass: the transpose of a
// rotation is its inverse). Angles and their cos/sin are computed in f64, then
// rounded to acc_t<T> (f32, or f64 for f64) for the rotation; out may alias x.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"
#include "trident/kernels/rope_frequencies.h"

namespace trident::kernels::cpu {
#include "trident/kernels/rope.h"
}  // namespace trident::kernels::cpu
