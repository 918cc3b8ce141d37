// Internal to kernels/cuda: the norm backward launchers (norm.cu) that norm.cpp
// calls once it has allocated their scratch. C++17 and fmt-free.
#pragma once

#include <cstddef>
#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cuda::detail {

// Bytes of scratch a norm backward needs for `arrays` weight-gradient partials
// (2 for LayerNorm's dweight and dbias, 1 for RMSNorm's dweight): one row of
// `cols` statistics-type values per row chunk. 0 when rows == 0.
std::size_t norm_backward_scratch_bytes(DType dtype, std::int64_t rows, std::int64_t cols, int arrays);

// The backward kernels; `scratch` holds norm_backward_scratch_bytes(...) bytes of
// device memory that stays allocated until the queued work has run (stream order).
void launch_layer_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* mean,
                                const void* rstd, void* dx, void* dweight, void* dbias, std::int64_t rows,
                                std::int64_t cols, void* scratch);
void launch_rms_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* rstd,
                              void* dx, void* dweight, std::int64_t rows, std::int64_t cols, void* scratch);

}  // namespace trident::kernels::cuda::detail
