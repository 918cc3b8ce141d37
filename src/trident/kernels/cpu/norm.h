// CPU normalisation kernels: LayerNorm and RMSNorm over the last dimension.
//
// Shapes: x, y, dy, dx are [rows, cols] contiguous in `dtype`; weight, bias,
// dweight, dbias are [cols] in `dtype`; mean and rstd are [rows] in the
// accumulation type acc_t (f32 for f32/bf16/f16, f64 for f64). Arguments are
// already validated by ops:: (cols >= 1, pointers non-null unless noted).
//
// Numerics: every row is reduced in acc_t with a fixed 64-lane summation
// order (vectorisable, identical on every thread count); LayerNorm's variance
// is a corrected two-pass one (mean, then sums of deviations and their
// squares), so an offset much larger than the spread does not cancel.
// Outputs are rounded to `dtype` once.
//
// Backward writes (does not accumulate into) dx, dweight and dbias. dweight
// and dbias are sums over rows: rows are cut into fixed blocks that depend only
// on `rows`, each block's partial sum is formed in acc_t, and the partials are
// combined in block order in f64 — the result is bit-identical for any thread
// count.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cpu {
#include "trident/kernels/norm.h"
}  // namespace trident::kernels::cpu
