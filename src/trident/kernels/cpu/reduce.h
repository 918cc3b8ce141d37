// CPU reduction kernels. Sums accumulate in f64 (whatever the input type) in
// fixed-size blocks combined in a fixed order, so results do not depend on
// the thread count — a requirement of layout equivalence.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cpu {
#include "trident/kernels/reduce.h"
}  // namespace trident::kernels::cpu
