// CUDA kernels: Embedding lookup and its dense gradient (ids radix-sorted with their positions, then one
// warp per vocabulary row and 256-column tile sums that id's dout rows in position order: no atomics, the
// CPU's summation order, the same bits on every run). find_invalid_id synchronises (host result).
//
// Same signatures and semantics as kernels/cpu/embedding.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/embedding.h"

namespace trident::kernels::cuda {

void embedding_forward(DType dtype, DType id_dtype, const void* weight, const void* ids, void* out,
                       std::int64_t num_ids, std::int64_t dim);

void embedding_backward(DType dtype, DType grad_dtype, DType id_dtype, const void* dout, const void* ids,
                        void* dweight, std::int64_t num_ids, std::int64_t vocab, std::int64_t dim, bool accumulate);

std::int64_t find_invalid_id(DType id_dtype, const void* ids, std::int64_t num_ids, std::int64_t vocab,
                             std::int64_t* bad_id);

}  // namespace trident::kernels::cuda
