// CPU elementwise kernels. Arguments are already validated by ops::; pointers
// are contiguous arrays of `n` elements of the dispatched dtype. Arithmetic is
// done in acc_t<T> (f32 for f32/bf16/f16, f64 for f64) and rounded once on store.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cpu {

enum class BinaryOp { add, sub, mul };

#include "trident/kernels/elementwise.h"
}  // namespace trident::kernels::cpu
