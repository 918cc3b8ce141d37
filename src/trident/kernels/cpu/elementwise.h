// CPU elementwise kernels. Arguments are already validated by ops::; pointers
// are contiguous arrays of `n` elements of the dispatched dtype. Arithmetic is
// done in acc_t<T> (f32 for f32/bf16/f16, f64 for f64) and rounded once on store.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cpu {

enum class BinaryOp { add, sub, mul };

// out = a (op) b, all of `dtype`.
void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, std::int64_t n);
// out = a * s
void scale(DType dtype, const void* a, double s, void* out, std::int64_t n);
// dst += alpha * src (dst and src of `dtype`)
void axpy(DType dtype, double alpha, const void* src, void* dst, std::int64_t n);
// out[r, c] = x[r, c] + bias[c] for r < rows, c < cols
void bias_add(DType dtype, const void* x, const void* bias, void* out, std::int64_t rows, std::int64_t cols);

}  // namespace trident::kernels::cpu
