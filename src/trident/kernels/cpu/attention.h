// CPU scaled-dot-product attention, flash-style (blocked, online softmax).
//
// Shapes (contiguous, row-major): q [B, T, H, D], k and v [B, S, Hkv, D],
// out and dout [B, T, H, D], lse [B, H, T], optional additive mask [T, S]
// broadcast over batch and heads, optional key-padding mask [B, S] (dtype
// dims.key_mask_dtype: i64, i32 or u8; 0 hides key s from every query of
// sample b). Query head h reads kv head h / (H / Hkv)
// (grouped-query attention). q, k, v, out, dout and mask share one floating
// dtype T; lse is acc_t<T> (f32, or f64 for f64 inputs), as are all products,
// exponentials and sums — f16 is converted once into f32 tiles and the
// results rounded once on store. bf16, when built for a CPU with AVX512-BF16
// (attention_uses_bf16_dot_products()), multiplies bf16 operands into f32 sums
// instead (attention_bf16.cpp): the inputs as given, and P and dS rounded to
// bf16 first, as a bf16 GEMM would.
//
// Score of query t and key s: scale · q_t·k_s + mask[t, s]; with `causal`,
// keys s > t + shift are excluded, shift = S − T (bottom-right alignment, the
// KV-cache case S > T) or, for q and k at given global positions (a chunk pair
// of context parallelism: dims.positioned), q_pos − k_pos; and with a sliding
// `window` > 0 also keys s ≤ t + shift − window (ops/attention.h); padding keys (key mask 0) are hidden like a −inf mask
// entry. With dims.dropout.p > 0 (training), the probabilities P = softmax(S)
// enter the product with V as Z = P ∘ keep, keep = 1/(1 − p) or 0 drawn from
// the counter-based generator at the global index of (sample, head, query,
// key) (AttentionDropout); lse stays that of P. The mask is never stored: the
// forward and both backward tasks regenerate it per tile row, and the backward
// uses dP = keep ∘ (dout·Vᵀ), dS = P ∘ (dP − Di) (Di = Σ dout·out = Σ Z·(dout·Vᵀ)
// still) and dV = Zᵀ·dout. With p = 0 nothing of this runs. Each query block visits only the key tiles that meet its visible range
// [first, last] and hold a real key (and each key block only the query tiles
// that see it; a key block of padding only gets dk = dv = 0 at once), masking
// per element inside partial tiles, so a windowed call costs O(T·window), not
// O(T·S). A row with no visible key gets out = 0 and lse = −inf.
//
// The T×S score matrix is never formed: a task holds one 64-query × 64-key
// tile of scores; a thread holds acc_t copies of the K/V (or Q/dout) rows of
// the head it is working on (O(S·D) per thread). Forward tasks are (batch,
// head, query block). Backward recomputes the scores from q, k and lse with
// two kinds of task: dk/dv per (batch, kv head, key block), summing over the
// query heads of the group and the query blocks in a fixed order, and dq per
// (batch, head, query block). No task writes what another writes and every sum
// has a fixed order, so results are identical for every thread count.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cpu {

// Dropout on the attention probabilities (ops/attention.h). Probability (b, h, t, s) of a call is dropped
// iff CounterRng(seed, stream).uniform(g) < p (kernels/dropout_rule.h) at the global index
// g = (((batch_offset + b)·heads + head_offset + h)·T + t)·S + s, so a call holding some samples (data
// parallelism, micro-batches) or some heads (tensor parallelism) draws what the whole layer would.
struct AttentionDropout {
  double p = 0.0;                      // in [0, 1); 0 = none
  std::uint64_t seed = 0, stream = 0;  // the CounterRng's
  std::int64_t batch_offset = 0;       // the global sample of batch row 0
  std::int64_t head_offset = 0;        // the global head of head 0
  std::int64_t heads = 0;              // the layer's heads in all (≥ head_offset + H)
  // The (query, key) grid the index runs over: query q_offset + t of q_grid and key k_offset + s of k_grid
  // (0: T and S, offsets 0: the call holds the whole sequence).
  std::int64_t q_offset = 0, k_offset = 0, q_grid = 0, k_grid = 0;
};

// Block-sparse attention (ops::AttentionOptions::block_layout): query t of head h sees key s only if
// blocks[(hl · rows + t / block) · cols + s / block] != 0, hl = 0 for a layout shared by every head
// (heads == 1), else head_offset + h; on top of the causal rule and the key padding. Null blocks: dense.
// The layout lives on q's device. T = S (self-attention, unpositioned), T ≤ rows · block and S ≤ cols ·
// block; no additive mask, window or documents. The kernels visit only the layout's blocks.
struct AttentionLayout {
  const std::uint8_t* blocks = nullptr;
  std::int64_t heads = 0, rows = 0, cols = 0, block = 0, head_offset = 0;
};

struct AttentionDims {
  std::int64_t batch = 0;     // B
  std::int64_t q_len = 0;     // T
  std::int64_t kv_len = 0;    // S
  std::int64_t heads = 0;     // H
  std::int64_t kv_heads = 0;  // Hkv, divides H
  std::int64_t head_dim = 0;  // D
  bool causal = true;
  std::int64_t window = 0;  // with causal: query p = t + S − T sees keys (p − window, p]; 0 = unlimited
  double scale = 1.0;  // the factor on q·k (already resolved; never 0 here)
  DType key_mask_dtype = DType::u8;  // of the key-padding mask, when one is passed: i64, i32 or u8
  AttentionDropout dropout = {};     // on the probabilities; p = 0: none
  // q and k at global positions (query t at q_pos + t, key s at k_pos + s): the causal rule, the window and
  // the documents compare those; false: bottom-right alignment (q_pos = S − T, k_pos = 0).
  bool positioned = false;
  std::int64_t q_pos = 0, k_pos = 0;
  AttentionLayout layout = {};  // block-sparse attention; blocks null: dense
  // The position of key 0, and the shift of the causal rule (query t sees keys s ≤ t + shift).
  std::int64_t key_position() const { return positioned ? k_pos : 0; }
  std::int64_t shift() const { return positioned ? q_pos - k_pos : kv_len - q_len; }
};

// attention_merge: accumulators out [B, T, H, D] and lse [B, H, T] (acc type: f32, f64 for f64) take a
// partial attention over other keys, part_out [B, P, H, D] (the partial's dtype) and part_lse [B, H, P]
// (acc type), at rows [row_begin, row_begin + P). Per row, with m = max(lse, part_lse): rows where both are
// −inf stay; otherwise a = exp(lse − m), b = exp(part_lse − m), out ← (a·out + b·part_out)/(a + b) and
// lse ← m + log(a + b): the attention over the union of both key sets (the online softmax's rescale).
struct AttentionMergeDims {
  std::int64_t batch = 0;      // B
  std::int64_t rows = 0;       // T, the accumulators' rows
  std::int64_t part_rows = 0;  // P
  std::int64_t row_begin = 0;  // 0 ≤ row_begin ≤ T − P
  std::int64_t heads = 0;      // H
  std::int64_t head_dim = 0;   // D
};

// Whether bf16 runs on AVX512-BF16 dot products in this build.
bool attention_uses_bf16_dot_products() noexcept;

#include "trident/kernels/attention.h"
}  // namespace trident::kernels::cpu
