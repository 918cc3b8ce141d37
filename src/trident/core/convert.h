// Element-wise dtype conversion on host memory (vectorised, multithreaded).
#pragma once

#include <cstdint>

#include "trident/core/dtype.h"

namespace trident {

class Tensor;

// Converts `count` elements from `src` (of `src_dtype`) to `dst` (of `dst_dtype`) on the host.
// Floating → integer truncates toward zero; all float narrowing rounds to nearest even.
void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t count);
// Sets every element of a host tensor to `value` (converted to its dtype).
void fill_value(Tensor& t, double value);

}  // namespace trident
