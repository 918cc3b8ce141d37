// CPU reduction kernels. Sums accumulate in f64 (whatever the input type) in
// fixed-size blocks combined in a fixed order, so results do not depend on
// the thread count — a requirement of layout equivalence.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cpu {

// Sum of all n elements, returned as double.
double sum_all(DType dtype, const void* x, std::int64_t n);
// out[c] = sum_r x[r, c]  (out has `dtype`)
void sum_rows(DType dtype, const void* x, void* out, std::int64_t rows, std::int64_t cols);

}  // namespace trident::kernels::cpu
