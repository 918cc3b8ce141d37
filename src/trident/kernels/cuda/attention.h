// CUDA kernels: flash attention forward and backward: tiles of K/V streamed through shared memory with an
// online softmax, never materialising the [T, S] scores; lse (f32, f64 for f64; [B, H, T]) saved for backward.
//
// Signatures: kernels/attention.h. Semantics: kernels/cpu/attention.h (see there and kernels/cuda/common.cuh):
// pointers are device memory of the current CUDA device; work is queued on its compute stream. Layouts
// q/out/dout [B, T, H, D], k/v [B, S, Hkv, D], optional additive mask [T, S], optional key-padding mask
// [B, S] (i64, i32 or u8: dims.key_mask_dtype; 0 hides the key, tested per element, padding-only tiles are
// not skipped here); GQA, bottom-right causal alignment, the sliding window (only the key tiles of a query
// tile's visible range are loaded, and only the query tiles that see a key tile), rows with no visible key
// giving out = 0 and lse = −inf, and dropout on the probabilities (dims.dropout: the CPU's mask to the bit,
// drawn per element where it is used), all as on the CPU.
//
// head_dim: 1 to 128 (padded inside to 32, 64 or 128; larger is a clear error). dtypes: bf16 and f16 on
// tensor cores (mma.sync m16n8k16, f32 accumulation, P and dS rounded to the input dtype as operands of
// the second product); f32 and f64 with plain FMAs (no TF32: f32 follows the CPU to about 1e-6).
// Deterministic: every output element is written by one block, sums run in a fixed order, no atomics.
//
// Launch shapes (one-dimensional grids; blocks ordered so the longest causal query tiles start first):
//   bf16/f16, 128 threads (4 warps × 16 rows), 64-row tiles, Dp = padded head_dim:
//     forward      B·H·⌈T/64⌉ blocks: Q, K [64][Dp+8] and Vᵀ [Dp][72]; 14.5 / 27 / 52 KB at Dp 32 / 64 / 128
//     backward dK/dV  B·Hkv·⌈S/64⌉ blocks (sum over the group's heads and query tiles): K, V, Q, dO
//                  [64][Dp+8], Qᵀ, dOᵀ [Dp][72], lse and Di [64]; 29.5 / 54.5 / 104.5 KB
//     backward dQ  B·H·⌈T/64⌉ blocks (sum over key tiles): Q, dO, K, V [64][Dp+8], Kᵀ [Dp][72];
//                  24.5 / 45 / 86 KB
//   f32 (f64), 256 threads as 16 × 16, each owning rows r + 16i and columns c + 16j of a tile product:
//     forward      B·H·⌈T/64⌉ (⌈T/32⌉) blocks, 64 (32) queries × 32 (16) keys: Q·scale, K, V [][Dp+1],
//                  scores [64][33], row max/sum/rescale; up to 73.5 (69.5) KB at Dp 128
//     backward dK/dV  B·Hkv·⌈S/32⌉ (⌈S/16⌉) blocks, 32 (16) keys × 32 (16) queries: K, V, Q·scale, dO
//                  [][Dp+1], Pᵀ, dSᵀ [32][33], lse, Di; up to 73 (69) KB
//     backward dQ  B·H·⌈T/32⌉ (⌈T/16⌉) blocks: Q·scale, dO, K, V [][Dp+1], dS [32][33]; same bound
//   plus, for the backward, Di = Σ dout·out: one warp per query row into a [B, H, T] workspace that
//   attention_backward allocates from the caching allocator.
// Shared memory above 48 KB is requested per launch (cudaFuncAttributeMaxDynamicSharedMemorySize); sm_80
// and sm_90 allow 163 and 227 KB. sm_86, sm_89 and sm_120 allow 99 KB: there the bf16/f16 backward with
// head_dim > 64 (dK/dV kernel, 104.5 KB) stops with an error naming both sizes.
#pragma once

#include <cstdint>

#include "trident/kernels/cpu/attention.h"

namespace trident::kernels::cuda {

using cpu::AttentionDims;
using cpu::AttentionMergeDims;

#include "trident/kernels/attention.h"
}  // namespace trident::kernels::cuda
