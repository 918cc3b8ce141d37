// CPU embedding kernels: a row gather and its scatter-add backward.
//
// Shapes: weight [vocab, dim] (f32, f64, bf16, f16), ids [num_ids] (i32 or
// i64, already checked to lie in [0, vocab) by ops::), out [num_ids, dim].
// Forward copies rows; it is exact in every dtype.
// Backward: with S[v, :] the sum of dout[t, :] over the t with ids[t] == v, in
// increasing t, accumulated in acc_t (f32 for bf16/f16, f64 for f64),
//   overwrite:  dweight[v, :] = S[v, :] rounded once; rows no id refers to are zero;
//   accumulate: dweight[v, :] += S[v, :] for the rows some id refers to (added
//               in dweight's dtype), the others untouched — a gradient buffer.
// dweight's dtype (grad_dtype) is dout's, or f32 for bf16/f16 dout (an f32
// master weight's gradient). Tokens are bucketed by id with a stable counting
// sort and each thread owns a contiguous range of vocabulary rows, so there are
// no atomics and the result is bit-identical for every thread count.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cpu {
#include "trident/kernels/embedding.h"
}  // namespace trident::kernels::cpu
