// Internal to kernels/cuda: the embedding launchers (embedding.cu) that
// embedding.cpp calls once it has allocated their scratch. C++17 and fmt-free.
#pragma once

#include <cstddef>
#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cuda::detail {

// Bytes of device scratch embedding_backward needs: the sorted (id, position)
// pairs, per-id run bounds and cub's radix-sort workspace. 0 when there is
// nothing to sort. Throws for more than 2^31 - 1 ids or vocabulary rows.
std::size_t embedding_backward_scratch_bytes(std::int64_t num_ids, std::int64_t vocab);

// embedding_backward (kernels/cpu/embedding.h) with `scratch` of
// embedding_backward_scratch_bytes(num_ids, vocab) bytes, kept allocated until
// the queued work has run (stream order).
void launch_embedding_backward(DType dtype, DType grad_dtype, DType id_dtype, const void* dout, const void* ids,
                               void* dweight, std::int64_t num_ids, std::int64_t vocab, std::int64_t dim,
                               bool accumulate, void* scratch);

// find_invalid_id (kernels/cpu/embedding.h) with `scratch` of one int64 of
// device memory. Synchronises the compute stream (it returns host values).
std::int64_t launch_find_invalid_id(DType id_dtype, const void* ids, std::int64_t num_ids, std::int64_t vocab,
                                    std::int64_t* bad_id, void* scratch);

}  // namespace trident::kernels::cuda::detail
