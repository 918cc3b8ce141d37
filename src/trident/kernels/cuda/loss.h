// CUDA kernels: Softmax cross-entropy over the vocabulary, one row per block, never writing fp32 probabilities:
// forward keeps only lse per row, backward recomputes softmax into dlogits. Plus the vocab-parallel
// (TP) pieces. count_targets synchronises (host result).
//
// Same signatures and semantics as kernels/cpu/loss.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/loss.h"

namespace trident::kernels::cuda {

void cross_entropy_forward(DType dtype, DType target_dtype, const void* logits, const void* targets, void* losses,
                           void* lse, std::int64_t rows, std::int64_t vocab, std::int64_t ignore_index);

void cross_entropy_backward(DType dtype, DType target_dtype, const void* logits, const void* targets, const void* lse,
                            const void* grad_losses, void* dlogits, std::int64_t rows, std::int64_t vocab,
                            std::int64_t ignore_index);

void vocab_parallel_forward(DType dtype, DType target_dtype, const void* logits, const void* targets, void* row_max,
                            void* target_logit, void* sum_exp, std::int64_t rows, std::int64_t cols,
                            std::int64_t valid, std::int64_t vocab_begin, std::int64_t ignore_index);

void vocab_parallel_rebase_sums(DType acc, void* sum_exp, const void* row_max, const void* group_max,
                                std::int64_t rows);

void vocab_parallel_backward(DType dtype, DType target_dtype, const void* logits, const void* targets,
                             const void* group_max, const void* group_sum, double scale, void* dlogits,
                             std::int64_t rows, std::int64_t cols, std::int64_t valid, std::int64_t vocab_begin,
                             std::int64_t ignore_index);

std::int64_t count_targets(DType target_dtype, const void* targets, std::int64_t rows, std::int64_t vocab,
                           std::int64_t ignore_index, std::int64_t* bad_row, std::int64_t* bad_target);

}  // namespace trident::kernels::cuda
