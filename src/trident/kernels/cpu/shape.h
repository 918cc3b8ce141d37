// CPU data-movement kernels for the shape ops. Byte-generic: they move
// elements of `elem_size` bytes and never look at values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "trident/core/shape.h"

namespace trident::kernels::cpu {
#include "trident/kernels/shape.h"
}  // namespace trident::kernels::cpu
