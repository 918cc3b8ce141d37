// Scaled-dot-product attention (flash-style on the CPU: the T×S score matrix
// is never materialised; see kernels/cpu/attention.h for the numerics).
//
// Layout: q [B, T, H, D]; k and v [B, S, Hkv, D] with H % Hkv == 0 — query head
// h attends with kv head h / (H / Hkv) (grouped-query attention; Hkv == H is
// plain multi-head attention). This is the layout a QKV projection produces
// after a reshape, so no permute is needed on either side.
// dtypes: q, k, v (and the mask) share one floating dtype: f32, f64, bf16 or
// f16 (bf16/f16 computed in f32). out has q's dtype; lse is f32 (f64 for f64).
//
// Which keys a query sees: the keys that the causal rule and the sliding window
// (when set) leave, less the padding keys of its sample (key_mask), with the
// additive mask added to the scores of those. A query that sees no key at all
// (every key hidden or -inf) gets a zero output and lse = −inf.
//
// Dropout on the attention probabilities (options.dropout, for training):
// out = (P ∘ keep)·V with P = softmax(scores) and keep = 1/(1 − p) or 0 per
// (sample, head, query, key), drawn from the counter-based generator at the
// element's global coordinates. The mask is never stored: the backward, given
// the same options, regenerates it. lse stays that of P.
#pragma once

#include <cstdint>
#include <string_view>
#include <tuple>
#include <utility>

#include "trident/core/rng.h"
#include "trident/core/tensor.h"

namespace trident::ops {

// Dropout on the probabilities: probability P[b, h, t, s] is dropped iff rng.uniform(g) < p (the
// dropout op's rule, ops/dropout.h) at g = (((batch_offset + b)·heads + head_offset + h)·T + t)·S + s,
// so a call holding some samples of the global batch (data parallelism, micro-batches) or some heads of
// the layer (tensor parallelism) drops what the whole layer would; kept ones are scaled by 1/(1 − p).
struct AttentionDropout {
  double p = 0;                   // in [0, 1); 0 = none (the plain kernels, bit for bit)
  CounterRng rng{0, 0};           // a fresh stream per layer and step (nn::ForwardContext::dropout_rng)
  std::int64_t batch_offset = 0;  // the global sample of q's batch row 0
  std::int64_t head_offset = 0;   // the layer's head of q's head 0
  std::int64_t heads = 0;         // the layer's heads in all; 0 = q's H
  // With q and k at global positions (AttentionOptions::query_position): the length of the sequence
  // they are chunks of, so that T and S in the index above are that length and t, s the global
  // positions; each chunk pair then drops what the whole sequence's call drops. 0 = q and k as given.
  std::int64_t seq_len = 0;
};

struct AttentionOptions {
  // Query t attends to keys s ≤ t + (S − T): bottom-right aligned, so with a
  // KV cache (S > T) the T new queries see the whole cache plus their prefix.
  bool causal = true;
  // Factor on q·k; 0 means 1 / sqrt(D).
  double scale = 0;
  // Optional additive mask [T, S] of q's dtype, broadcast over batch and heads
  // (-inf hides a key). A query that sees no key at all gets a zero output.
  Tensor mask;
  // Sliding window (Mistral): 0 = unlimited. With causal, the query at absolute
  // position p = t + (S − T) sees the keys s with p − window < s ≤ p, i.e. the
  // `window` most recent keys including its own, in the KV-cache case too. This
  // is the rule of Hugging Face transformers' sliding-window causal mask (key
  // visible iff kv_idx > q_idx − sliding_window and kv_idx ≤ q_idx). Kernels
  // visit only the keys in range, so the cost grows with T·window, not T·S.
  // window < 0 is an error, and so is window > 0 without causal (no symmetric
  // band is defined). The mask, if any, applies on top of the window. After
  // {causal, scale, mask}, so positional initialisers of those keep their meaning.
  std::int64_t window = 0;
  // Optional key-padding mask [B, S] (Hugging Face's attention_mask): a nonzero entry marks a real key,
  // 0 a padding key that no query of that sample sees. dtype i64, i32 or u8; on q's device.
  // It applies on top of causal, window and mask (BERT: causal = false, key_mask only). A query whose
  // sample has no real key among the keys it would see gets a zero output and lse = −inf. The CPU
  // kernels skip the key tiles that hold padding only. It is a constant: no gradient flows to it.
  Tensor key_mask;
  // Dropout on the probabilities (above); the backward must be given the same.
  AttentionDropout dropout = {};
  // Packed documents (Megatron's reset_attention_mask): i32 [B, T], the position of the first token of
  // each query's document (0 for the first document; a document's first token at position p has
  // document_starts = p, and every later token of it the same value). Query t then sees only the keys of
  // its own document: position ≥ document_starts[b, t], on top of causal and window. Needs causal, and
  // S = T unless q and k are positioned (below). The kernels skip the key tiles of other documents, so a
  // sample of n documents of length L costs about n·L², not (n·L)². On q's device; a constant.
  Tensor document_starts = {};
  // q and k as chunks of a longer sequence (context parallelism): the global positions of q's row 0 and
  // k's row 0, both ≥ 0; query t (at query_position + t) sees key s (at key_position + s) under causal
  // iff key_position + s ≤ query_position + t, and the window and the documents compare positions too.
  // Both −1 (the default): bottom-right alignment, query t at S − T + t and key s at s.
  std::int64_t query_position = -1, key_position = -1;
  // Block-sparse attention (DeepSpeed's sparse_attention; models/sparse_attention.h builds the layouts):
  // u8 [Hl, rows, cols] on q's device. Query t of head h sees key s only where layout[hl, t / block,
  // s / block] != 0 (hl = 0 when Hl = 1, else layout_head_offset + h: the layer's head under tensor
  // parallelism), on top of causal and the key mask. The kernels visit only the selected blocks, so the
  // cost follows the layout's density. Self-attention (S = T, at most rows·block), without an additive
  // mask, a window, documents or positions. A layout without a block: dense attention.
  Tensor block_layout = {};
  std::int64_t block = 0;
  std::int64_t layout_head_offset = 0;
};

// Returns (out [B, T, H, D], lse [B, H, T]): lse is the log-sum-exp of the
// scaled, masked scores of each query row (−inf for a row with no visible key),
// kept for the backward pass.
std::pair<Tensor, Tensor> attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

// Gradients (dq, dk, dv) of the attention output from the forward's out and lse
// and the output gradient dout [B, T, H, D]. Neither mask receives a gradient;
// dk and dv are zero at padding keys.
std::tuple<Tensor, Tensor, Tensor> attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                      const Tensor& out, const Tensor& lse, const Tensor& dout,
                                                      const AttentionOptions& options = {});

// Checks document starts [B, T] of whole sequences (AttentionOptions::document_starts: each row a run of
// documents from position 0); the error names `op`, the entry and what it may be. ops::attention checks its
// own; context parallelism's chunks check the whole sequence's once with this.
void check_document_starts(const Tensor& starts, std::string_view op);

// Merges a partial attention into accumulators, in place (context parallelism's ring: each block of keys'
// result folded into the running one). out [B, T, H, D] and lse [B, H, T] hold the attention of rows
// over the keys seen so far (out 0 and lse −inf for none yet); part_out [B, P, H, D] and part_lse
// [B, H, P] are ops::attention's result for rows [row_begin, row_begin + P) over other keys. Afterwards
// those rows hold the attention over both key sets: per row, with m = max(lse, part_lse),
// a = e^(lse − m), b = e^(part_lse − m): out ← (a·out + b·part_out)/(a + b), lse ← m + log(a + b); a row
// that sees no key in either keeps out 0 and lse −inf. out, lse and part_lse have the acc dtype of
// part_out's (f32; f64 for f64), so the merge of bf16 parts accumulates in f32. Not differentiable: the
// ring's backward (parallel/context) feeds the merged out and lse to attention_backward, block by block.
void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse,
                     std::int64_t row_begin);

}  // namespace trident::ops
