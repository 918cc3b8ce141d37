// CPU cross-entropy fused with log-softmax.
//
// Shapes: logits [rows, vocab] (f32, f64, bf16, f16), targets [rows] (i32 or
// i64; every target is either ignore_index or in [0, vocab), checked by ops::),
// losses and lse [rows] in acc_t of the logits (f32, or f64 for f64 logits).
//
// Forward, per row, in acc_t: two passes over the row (max, then the sum of
// exp(x - max) in a fixed number of lanes combined in a fixed order),
//   lse = max + log(sum),  loss = lse - x[target]  (0 for an ignored row; its lse is still computed).
// No [rows, vocab] temporary is allocated; bf16 logits are widened on the fly.
// Backward writes (does not add into) dlogits [rows, vocab] in the logits' dtype:
//   dlogits[i, j] = (exp(x[i, j] - lse[i]) - [j == target[i]]) * grad_losses[i],
// rounded once, and all zero for an ignored row.
// f32 exponentials use a vectorised polynomial (within about 1 ulp); f64 uses std::exp.
// Each row is handled by one thread, so results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cpu {
#include "trident/kernels/loss.h"
}  // namespace trident::kernels::cpu
