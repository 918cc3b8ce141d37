// Internal: the launchers of attention.cu, called by attention.cpp (which validates the dimensions and
// owns the backward's workspace). C++17 and fmt-free. Layouts and numerics: kernels/cpu/attention.h.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/attention.h"

namespace trident::kernels::cuda {

// Largest head_dim the kernels take (padded inside to 32, 64 or 128).
inline constexpr std::int64_t kMaxAttentionHeadDim = 128;

// out and lse (acc type: f32, f64 for f64). key_mask (may be null): [B, S] of dims.key_mask_dtype;
// doc_starts (may be null): [B, T] i32, each token's document's first token (kernels/cpu/attention.h).
void launch_attention_forward(DType dtype, const cpu::AttentionDims& dims, const void* q, const void* k, const void* v,
                              const void* mask, const void* key_mask, const std::int32_t* doc_starts, void* out,
                              void* lse);

// dq, dk, dv. `di` is a workspace of B·H·T acc-type values (Di = Σ_d dout·out per query row).
void launch_attention_backward(DType dtype, const cpu::AttentionDims& dims, const void* q, const void* k, const void* v,
                               const void* mask, const void* key_mask, const std::int32_t* doc_starts,
                               const void* out, const void* lse, const void* dout, void* dq, void* dk, void* dv,
                               void* di);

// out and lse (acc type) take part_out (dtype) and part_lse at rows [row_begin, row_begin + P).
void launch_attention_merge(DType dtype, const cpu::AttentionMergeDims& dims, void* out, void* lse,
                            const void* part_out, const void* part_lse);

// Block-sparse attention (dims.layout set; attention_sparse.cu): the forward, and the backward given Di.
void launch_block_sparse_forward(DType dtype, const cpu::AttentionDims& dims, const void* q, const void* k,
                                 const void* v, const void* key_mask, void* out, void* lse);
void launch_block_sparse_backward(DType dtype, const cpu::AttentionDims& dims, const void* q, const void* k,
                                  const void* v, const void* key_mask, const void* lse, const void* dout,
                                  const void* di, void* dq, void* dk, void* dv);

}  // namespace trident::kernels::cuda
