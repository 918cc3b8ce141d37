// Pieces shared by the CPU attention kernels (attention.cpp: f32/f64 tile
// products; attention_bf16.cpp: AVX512-BF16 dot products): the 64×64 tile
// geometry and which keys each query sees (causal, window, key padding), the
// dropout on the probabilities, per-thread scratch, the online-softmax row operations on f32 score rows, and
// an in-register 16×16 transpose. Internal to kernels/cpu.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "trident/core/parallel.h"
#include "trident/kernels/cpu/attention.h"
#include "trident/kernels/cpu/dropout.h"
#include "trident/kernels/cpu/softmax.h"

namespace trident::kernels::cpu {

// Block-sparse attention (AttentionDims::layout set; attention_sparse.cpp), which attention_forward and
// attention_backward hand their calls to.
void block_sparse_attention_forward(DType dtype, const AttentionDims& dims, const void* q, const void* k,
                                    const void* v, const void* key_mask, void* out, void* lse);
void block_sparse_attention_backward(DType dtype, const AttentionDims& dims, const void* q, const void* k,
                                     const void* v, const void* key_mask, const void* out, const void* lse,
                                     const void* dout, void* dq, void* dk, void* dv);

}  // namespace trident::kernels::cpu

namespace trident::kernels::cpu::attention_detail {

using i64 = std::int64_t;

constexpr i64 kTile = 64;  // queries and keys per tile
constexpr i64 kRows = 4;   // tile row counts are rounded up to this (padding rows are zero)

constexpr i64 round_up(i64 x, i64 m) { return (x + m - 1) / m * m; }
constexpr i64 ceil_div(i64 x, i64 m) { return (x + m - 1) / m; }

template <typename A>
constexpr A kNegInf = -std::numeric_limits<A>::infinity();

// A 64-byte-aligned scratch array.
template <typename A>
class Scratch {
 public:
  explicit Scratch(i64 n) {
    const auto bytes = static_cast<std::size_t>(round_up(std::max<i64>(n, 1) * static_cast<i64>(sizeof(A)), 64));
    p_ = static_cast<A*>(std::aligned_alloc(64, bytes));
    if (p_ == nullptr) throw std::bad_alloc();
  }
  ~Scratch() { std::free(p_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  A* get() const noexcept { return p_; }

 private:
  A* p_ = nullptr;
};

// ---------------------------------------------------------------------------
// Row operations on one 64-wide score row.

#ifdef __AVX512F__
// Horizontal max / sum of 16 lanes by a fixed tree of lane swaps. Zero-masked
// shuffles with an all-ones mask: the unmasked ones (and _mm512_reduce_*)
// start from _mm512_undefined_*(), which GCC 12 reports as uninitialised.
constexpr __mmask16 kAllLanes = 0xffff;
template <typename Op>
inline float lanes_reduce(__m512 v, Op op) {
  v = op(v, _mm512_maskz_shuffle_f32x4(kAllLanes, v, v, 0x4e));  // swap 256-bit halves
  v = op(v, _mm512_maskz_shuffle_f32x4(kAllLanes, v, v, 0xb1));  // swap 128-bit quarters
  v = op(v, _mm512_maskz_permute_ps(kAllLanes, v, 0x4e));        // swap 64-bit pairs
  v = op(v, _mm512_maskz_permute_ps(kAllLanes, v, 0xb1));        // swap neighbours
  return _mm512_cvtss_f32(v);
}
inline float lanes_max(__m512 v) {
  return lanes_reduce(v, [](__m512 a, __m512 b) { return _mm512_maskz_max_ps(kAllLanes, a, b); });
}
inline float lanes_sum(__m512 v) {
  return lanes_reduce(v, [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); });
}
#endif

#ifdef __AVX512F__
// Lanes x..x+15 of a row whose entries [first, lim) are visible.
inline __mmask16 visible_lanes(i64 first, i64 lim, i64 x) {
  const unsigned below_lim = (1u << std::clamp<i64>(lim - x, 0, 16)) - 1u;
  const unsigned below_first = (1u << std::clamp<i64>(first - x, 0, 16)) - 1u;
  return static_cast<__mmask16>(below_lim & ~below_first);
}
#endif

// max(init, row[j] for first ≤ j < lim).
template <typename A>
A row_max(const A* row, i64 first, i64 lim, A init) {
#ifdef __AVX512F__
  if constexpr (std::is_same_v<A, float>) {
    const __m512 neg_inf = _mm512_set1_ps(kNegInf<float>);
    __m512 m = neg_inf;
    for (i64 x = 0; x < kTile; x += 16)
      m = _mm512_maskz_max_ps(kAllLanes, m, _mm512_mask_loadu_ps(neg_inf, visible_lanes(first, lim, x), row + x));
    return std::max(init, lanes_max(m));
  }
#endif
  A mx = init;
  for (i64 j = first; j < lim; ++j) mx = std::max(mx, row[j]);
  return mx;
}

// row[j] = exp(row[j] − mx) for first ≤ j < lim and 0 elsewhere; returns the sum (in a fixed lane order).
template <typename A>
A row_exp_sum(A* row, i64 first, i64 lim, A mx) {
#ifdef __AVX512F__
  if constexpr (std::is_same_v<A, float>) {
    const __m512 m = _mm512_set1_ps(mx);
    __m512 sum = _mm512_setzero_ps();
    for (i64 x = 0; x < kTile; x += 16) {
      const __m512 p =
          _mm512_maskz_mov_ps(visible_lanes(first, lim, x), exp_f32x16(_mm512_sub_ps(_mm512_loadu_ps(row + x), m)));
      _mm512_storeu_ps(row + x, p);
      sum = _mm512_add_ps(sum, p);
    }
    return lanes_sum(sum);
  }
#endif
  A sum = 0;
  for (i64 j = 0; j < kTile; ++j) sum += (row[j] = j >= first && j < lim ? exp_acc(row[j] - mx) : A(0));
  return sum;
}

// For first ≤ j < lim: p = exp(s[j] − lse), s[j] = p, dp[j] = p·(dp[j] − di); elsewhere both are 0.
template <typename A>
void row_softmax_grad(A* s, A* dp, i64 first, i64 lim, A lse, A di) {
#ifdef __AVX512F__
  if constexpr (std::is_same_v<A, float>) {
    const __m512 l = _mm512_set1_ps(lse), d = _mm512_set1_ps(di);
    for (i64 x = 0; x < kTile; x += 16) {
      const __m512 p = _mm512_maskz_mov_ps(visible_lanes(first, lim, x), exp_f32x16(_mm512_sub_ps(_mm512_loadu_ps(s + x), l)));
      _mm512_storeu_ps(s + x, p);
      _mm512_storeu_ps(dp + x, _mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(dp + x), d)));
    }
    return;
  }
#endif
  for (i64 j = 0; j < kTile; ++j) {
    const A p = j >= first && j < lim ? exp_acc(s[j] - lse) : A(0);
    s[j] = p;
    dp[j] = p * (dp[j] - di);
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define TRIDENT_ATTENTION_VECTOR_PACK 1
// In-register transpose of 16 vectors in four rounds of two-source permutes:
// round b swaps the off-diagonal b×b blocks of each 2b×2b block.
inline void transpose16(__m512 (&r)[16]) {
  for (int b = 8; b >= 1; b /= 2) {
    alignas(64) std::int32_t lo[16], hi[16];
    for (int j = 0; j < 16; ++j) {
      lo[j] = (j & b) ? 16 + j - b : j;  // from the first vector keep j, take the partner's j − b
      hi[j] = (j & b) ? 16 + j : j + b;  // from the second: its own j, the first's j + b
    }
    const __m512i ilo = _mm512_load_si512(lo), ihi = _mm512_load_si512(hi);
    for (int i = 0; i < 16; ++i) {
      if (i & b) continue;
      const __m512 x = r[i], y = r[i + b];
      r[i] = _mm512_permutex2var_ps(x, ilo, y);
      r[i + b] = _mm512_permutex2var_ps(x, ihi, y);
    }
  }
}
#endif

#if defined(TRIDENT_ATTENTION_VECTOR_PACK) && defined(__AVX512BF16__)
#define TRIDENT_ATTENTION_BF16_DOT 1
// attention_bf16.cpp: bf16 inputs through AVX512-BF16 dot products (same
// contract as attention_forward / attention_backward for dtype bf16).
void attention_forward_bf16(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v, const bf16* mask,
                            const void* key_mask, const std::int32_t* doc_starts, bf16* out, float* lse);
void attention_backward_bf16(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v, const bf16* mask,
                             const void* key_mask, const std::int32_t* doc_starts, const bf16* out, const float* lse,
                             const bf16* dout, bf16* dq, bf16* dk, bf16* dv);
#endif

// Tasks per thread chunk so that a chunk has at least ~2^18 multiply-adds: tiny
// problems (decoding steps, unit tests) stay on one thread instead of paying
// for a parallel region.
inline i64 task_grain(i64 work_per_task) {
  return std::max<i64>(1, ceil_div(i64(1) << 18, std::max<i64>(work_per_task, 1)));
}

// Shared geometry: element offsets into the [B, T, H, D] / [B, S, Hkv, D] tensors.
struct Geometry {
  explicit Geometry(const AttentionDims& d)
      : B(d.batch), T(d.q_len), S(d.kv_len), H(d.heads), Hkv(d.kv_heads), D(d.head_dim),
        group(d.heads / d.kv_heads), Dp(round_up(d.head_dim, 16)), shift(d.shift()),
        window(d.causal ? d.window : 0), causal(d.causal), q_blocks(ceil_div(d.q_len, kTile)),
        k_blocks(ceil_div(d.kv_len, kTile)) {}
  i64 q_offset(i64 b, i64 t, i64 h) const { return ((b * T + t) * H + h) * D; }
  i64 kv_offset(i64 b, i64 s, i64 hk) const { return ((b * S + s) * Hkv + hk) * D; }
  i64 q_stride() const { return H * D; }
  i64 kv_stride() const { return Hkv * D; }
  // Query t (absolute position p = t + shift) sees keys s with p − window < s ≤ p under causal (window 0:
  // no lower bound), every key otherwise. Keys [kv_begin, kv_end) are the ones visible to some query of
  // the block of nq rows from t0.
  i64 kv_begin(i64 t0) const { return window > 0 ? std::clamp<i64>(t0 + shift - window + 1, 0, S) : 0; }
  i64 kv_end(i64 t0, i64 nq) const { return causal ? std::clamp<i64>(t0 + nq + shift, 0, S) : S; }
  // Queries [q_begin, q_end) are the ones that see some key of the tile of nk keys from s0.
  i64 q_begin(i64 s0) const { return causal ? std::clamp<i64>(s0 - shift, 0, T) : 0; }
  i64 q_end(i64 s0, i64 nk) const { return window > 0 ? std::clamp<i64>(s0 + nk - 1 - shift + window, 0, T) : T; }
  // Keys of the tile starting at s0 (nk keys) visible to query t: tile columns [first, lim).
  i64 visible_first(i64 t, i64 s0, i64 nk) const {
    return window > 0 ? std::clamp<i64>(t + shift - window + 1 - s0, 0, nk) : 0;
  }
  i64 visible(i64 t, i64 s0, i64 nk) const { return causal ? std::clamp<i64>(t + shift - s0 + 1, 0, nk) : nk; }
  // Tile columns [first, lim) that row i of the query block from t0 (nq live rows) sees in the tile of nk
  // keys from s0; empty for the padding rows i ≥ nq.
  std::pair<i64, i64> visible_cols(i64 t0, i64 nq, i64 i, i64 s0, i64 nk) const {
    if (i >= nq) return {0, 0};
    return {visible_first(t0 + i, s0, nk), visible(t0 + i, s0, nk)};
  }
  // Key tiles [begin, end) that meet the visible range of the query block of nq rows from t0.
  std::pair<i64, i64> key_blocks(i64 t0, i64 nq) const {
    return {kv_begin(t0) / kTile, ceil_div(kv_end(t0, nq), kTile)};
  }
  // Keys a query block can see at most (for the work estimates of task_grain).
  i64 keys_per_query() const { return window > 0 ? std::min(S, window + kTile) : S; }
  i64 queries_per_key() const { return window > 0 ? std::min(T, window + kTile) : T; }

  i64 B, T, S, H, Hkv, D, group, Dp, shift, window;
  bool causal;
  i64 q_blocks, k_blocks;
};

// The keys each sample hides from its queries beyond the geometry's causal and window rules: its
// padding keys (the key-padding mask [B, S], i64, i32 or u8; 0 = padding) and, for packed documents
// (document starts [B, T], i32: the position of the first token of each query's document; causal), every
// key of another document: key s (at position k_pos + s) is seen by query t iff k_pos + s ≥ start(t).
// Built once per call, before the parallel region (O(B·(S + T))).
//  - Padding: kept as bytes, 1 for a real key, with per (batch, key tile) whether the tile holds a
//    real key, so that tiles of padding only are skipped. Without a mask every key is real and
//    nothing is stored.
//  - Documents: query t sees keys from start(t) − k_pos on; key s is seen by queries before end(s), the
//    first query whose document starts after key s. Both are nondecreasing, so a query block's keys begin
//    at its first row's start and a key tile's queries end at its last key's end: attention visits only
//    the tiles that meet a document, and costs Σ over documents of their length², not T².
class HiddenKeys {
 public:
  HiddenKeys(const Geometry& g, const void* key_mask, DType dtype, const std::int32_t* doc_starts = nullptr,
             i64 key_position = 0)
      : S_(g.S), T_(g.T), k_blocks_(g.k_blocks) {
    if (doc_starts != nullptr) {
      // starts_ in local key indices (start − key_position); ends_[s] by a merge over the sorted starts.
      starts_.resize(static_cast<std::size_t>(g.B * g.T));
      ends_.resize(static_cast<std::size_t>(g.B * g.S));
      for (i64 b = 0; b < g.B; ++b) {
        for (i64 t = 0; t < g.T; ++t) {
          const auto i = static_cast<std::size_t>(b * g.T + t);
          starts_[i] = doc_starts[i] - key_position;
        }
        i64 t = 0;
        for (i64 s = 0; s < g.S; ++s) {
          while (t < g.T && starts_[static_cast<std::size_t>(b * g.T + t)] <= s) ++t;
          ends_[static_cast<std::size_t>(b * g.S + s)] = t;
        }
      }
    }
    if (key_mask == nullptr) return;
    const auto n = static_cast<std::size_t>(g.B * g.S);
    real_.resize(n);
    const auto nonzero = [&](const auto* m) {
      for (std::size_t i = 0; i < n; ++i) real_[i] = m[i] != 0 ? 1 : 0;
    };
    if (dtype == DType::i64) {
      nonzero(static_cast<const std::int64_t*>(key_mask));
    } else if (dtype == DType::i32) {
      nonzero(static_cast<const std::int32_t*>(key_mask));
    } else {
      nonzero(static_cast<const std::uint8_t*>(key_mask));  // u8 (ops::attention admits no other dtype)
    }
    tiles_.assign(static_cast<std::size_t>(g.B * g.k_blocks), 0);
    for (i64 b = 0; b < g.B; ++b)
      for (i64 s = 0; s < g.S; ++s)
        if (real_[static_cast<std::size_t>(b * g.S + s)] != 0)
          tiles_[static_cast<std::size_t>(b * g.k_blocks + s / kTile)] = 1;
  }
  // The padding bytes of sample b from key s0 on, or null when every key is real.
  const std::uint8_t* row(i64 b, i64 s0) const { return real_.empty() ? nullptr : real_.data() + b * S_ + s0; }
  // Whether key tile kb of sample b holds a real key.
  bool tile_has_keys(i64 b, i64 kb) const {
    return tiles_.empty() || tiles_[static_cast<std::size_t>(b * k_blocks_ + kb)] != 0;
  }
  // The first key of query t's document as a local key index (≤ 0 when it starts before this call's keys; 0
  // without documents), and the first query that no longer sees key s (T without documents).
  i64 document_start(i64 b, i64 t) const {
    return starts_.empty() ? 0 : starts_[static_cast<std::size_t>(b * T_ + t)];
  }
  i64 document_end(i64 b, i64 s) const { return ends_.empty() ? T_ : ends_[static_cast<std::size_t>(b * S_ + s)]; }
  // Tile columns [first, lim) of query t (tile of keys from s0) narrowed to its document.
  std::pair<i64, i64> document_cols(i64 b, i64 t, i64 s0, i64 first, i64 lim) const {
    if (starts_.empty() || lim <= first) return {first, lim};
    return {std::clamp<i64>(document_start(b, t) - s0, first, lim), lim};
  }

 private:
  i64 S_, T_, k_blocks_;
  std::vector<std::uint8_t> real_, tiles_;
  std::vector<i64> starts_, ends_;  // documents: [B, T] and [B, S]
};

// Key tiles [begin, end) that meet the keys some row of the query block of nq rows from t0 of sample b
// sees: the geometry's range, from the first row's document on.
inline std::pair<i64, i64> key_blocks(const Geometry& g, const HiddenKeys& keys, i64 b, i64 t0, i64 nq) {
  const auto [begin, end] = g.key_blocks(t0, nq);
  return {std::max(begin, std::clamp<i64>(keys.document_start(b, t0), 0, end * kTile) / kTile), end};
}

// Visible tile columns [first, lim) of row i of the query block from t0 (nq live rows) against the tile of
// nk keys from s0: the geometry's, narrowed to the row's document.
inline std::pair<i64, i64> visible_cols(const Geometry& g, const HiddenKeys& keys, i64 b, i64 t0, i64 nq, i64 i, i64 s0,
                                        i64 nk) {
  const auto [first, lim] = g.visible_cols(t0, nq, i, s0, nk);
  return keys.document_cols(b, t0 + i, s0, first, lim);
}

// The dropout on the probabilities of one call (AttentionDims::dropout): the keep factors (1/(1 − p) or
// 0) of query t of (b, h) against a run of keys, drawn at their global indices by the dropout op's own
// generator (dropout_keep_factors). Nothing is stored: each use regenerates its rows.
class ProbsDropout {
 public:
  explicit ProbsDropout(const AttentionDims& d)
      : active_(d.dropout.p > 0), rng_(d.dropout.seed, d.dropout.stream), rule_(drop_rule(d.dropout.p)),
        b0_(d.dropout.batch_offset), h0_(d.dropout.head_offset), heads_(d.dropout.heads),
        T_(d.dropout.q_grid > 0 ? d.dropout.q_grid : d.q_len), S_(d.dropout.k_grid > 0 ? d.dropout.k_grid : d.kv_len),
        t0_(d.dropout.q_offset), s0_(d.dropout.k_offset) {}
  bool active() const { return active_; }
  // keep[j] for keys s0 + first + j, j < lim − first, of query t of (b, h).
  template <typename A>
  void keep(i64 b, i64 h, i64 t, i64 s0, i64 first, i64 lim, A* keep) const {
    const i64 g = (((b0_ + b) * heads_ + h0_ + h) * T_ + t0_ + t) * S_ + s0_ + s0 + first;
    dropout_keep_factors(rng_, static_cast<std::uint64_t>(g), lim - first, rule_, keep);
  }

 private:
  bool active_;
  CounterRng rng_;
  DropRule rule_;
  i64 b0_, h0_, heads_, T_, S_, t0_, s0_;
};

// Queries [first, end) that see some key of key tile kb (nk keys from s0 = kb·64) of sample b: causal,
// t ≥ s − shift; window, t < s − shift + window; documents, t before the end of the tile's last key's
// document; none at all when the tile holds padding only.
inline std::pair<i64, i64> queries_seeing(const Geometry& g, const HiddenKeys& keys, i64 b, i64 kb, i64 nk) {
  if (!keys.tile_has_keys(b, kb)) return {0, 0};
  const i64 s0 = kb * kTile;
  const i64 begin = g.q_begin(s0), end = std::min(g.q_end(s0, nk), keys.document_end(b, s0 + nk - 1));
  // Empty as {0, 0}: callers loop over the query tiles from begin / 64 while a tile starts before end (a key
  // tile after every query of a chunk pair would otherwise visit query tile 0).
  return begin < end ? std::pair<i64, i64>{begin, end} : std::pair<i64, i64>{0, 0};
}

// Hides (−inf) the padding keys among the visible columns [first, lim) of a score row.
template <typename A>
void hide_padding(A* row, const std::uint8_t* key_row, i64 first, i64 lim) {
  if (key_row == nullptr) return;
  for (i64 j = first; j < lim; ++j)
    if (key_row[j] == 0) row[j] = kNegInf<A>;
}

// Forward, one score row of a tile (scores already scaled): adds the mask over
// the visible keys [first, lim), hides the padding keys (key_row: the sample's
// key bytes from the tile's first key, or null), folds them into the query's
// running max and sum, rescales its output accumulator row (Dp wide) when the
// max grows, and leaves exp(s − max) in the row (0 outside [first, lim) and at
// padding keys; all 0 while nothing is visible).
template <typename T, typename A>
void online_softmax_row(A* row, const T* mask_row, const std::uint8_t* key_row, i64 first, i64 lim, A& running_max,
                        A& running_sum, A* acc_row, i64 Dp) {
  if (mask_row != nullptr)
    for (i64 j = first; j < lim; ++j) row[j] += load(mask_row[j]);
  hide_padding(row, key_row, first, lim);
  const A mx = row_max(row, first, lim, running_max);
  if (mx == kNegInf<A>) {  // nothing visible to this query yet (or a padding row)
    std::fill_n(row, kTile, A(0));
    return;
  }
  const A alpha = exp_acc(running_max - mx);
  running_sum = running_sum * alpha + row_exp_sum(row, first, lim, mx);
  running_max = mx;
  if (alpha != A(1))
    for (i64 d = 0; d < Dp; ++d) acc_row[d] *= alpha;
}

// Forward, one score tile [M × 64] of sample b and head h: the query block from
// t0 (nq live rows, padding rows up to M) against the key tile of nk keys from
// s0, each row through online_softmax_row with its visible columns, its row of
// the additive mask (null: none) and the sample's key padding; with dropout,
// the row's exp(s − max) then times its keep factors (the running sum stays
// that of the undropped row, so lse is P's).
template <typename T, typename A>
void online_softmax_tile(const Geometry& g, const T* mask, const HiddenKeys& keys, const ProbsDropout& drop, i64 b,
                         i64 h, i64 t0, i64 nq, i64 M, i64 s0, i64 nk, A* scores, A* running_max, A* running_sum,
                         A* acc) {
  const std::uint8_t* key_row = keys.row(b, s0);
  for (i64 i = 0; i < M; ++i) {
    const auto [first, lim] = visible_cols(g, keys, b, t0, nq, i, s0, nk);
    const T* mask_row = mask != nullptr && lim > first ? mask + (t0 + i) * g.S + s0 : nullptr;
    A* row = scores + i * kTile;
    online_softmax_row(row, mask_row, key_row, first, lim, running_max[i], running_sum[i], acc + i * g.Dp, g.Dp);
    if (drop.active() && lim > first) {
      A keep[kTile];
      drop.keep(b, h, t0 + i, s0, first, lim, keep);
      for (i64 j = first; j < lim; ++j) row[j] *= keep[j - first];
    }
  }
}

// Forward, the end of a query block: out = acc / sum (rows [t0, t0 + nq) of
// head h, rounded once) and lse = max + log(sum) (−inf for a row that saw nothing).
template <typename T, typename A>
void store_output_rows(const Geometry& g, const A* acc, const A* running_max, const A* running_sum, i64 b, i64 h,
                       i64 t0, i64 nq, T* out, A* lse) {
  A* lse_row = lse + (b * g.H + h) * g.T + t0;
  for (i64 i = 0; i < nq; ++i) {
    T* dst = out + g.q_offset(b, t0 + i, h);
    const A* o = acc + i * g.Dp;
    const bool any = running_sum[i] > A(0);
    const A inv = any ? A(1) / running_sum[i] : A(0);
    for (i64 d = 0; d < g.D; ++d) dst[d] = store<T>(o[d] * inv);
    lse_row[i] = any ? running_max[i] + std::log(running_sum[i]) : kNegInf<A>;
  }
}

// Backward, a recomputed tile of sample b and head h: S (scaled scores) and
// dZ = dout·Vᵀ in place become P = exp(S + mask − lse) and dS = P ∘ (dP − Di)
// over the visible real keys, 0 elsewhere and in rows past nq or with
// lse = −inf (rows [0, M)). Without dropout dP = dZ; with it dP = keep ∘ dZ,
// and S becomes Z = P ∘ keep (what multiplies dout into dV).
template <typename T, typename A>
void softmax_grad_rows(const Geometry& g, const T* mask, const HiddenKeys& keys, const ProbsDropout& drop, i64 b, i64 h,
                       const A* lse_h, const A* di, i64 t0, i64 nq, i64 M, i64 s0, i64 nk, A* s, A* dp) {
  const std::uint8_t* key_row = keys.row(b, s0);
  for (i64 i = 0; i < M; ++i) {
    A* srow = s + i * kTile;
    A* dprow = dp + i * kTile;
    const i64 t = t0 + i;
    const bool live = i < nq && lse_h[t] != kNegInf<A>;
    const auto [first, lim] = visible_cols(g, keys, b, t0, live ? nq : 0, i, s0, nk);
    if (mask != nullptr && lim > first) {
      const T* mrow = mask + t * g.S + s0;
      for (i64 j = first; j < lim; ++j) srow[j] += load(mrow[j]);
    }
    hide_padding(srow, key_row, first, lim);
    const bool dropped = drop.active() && lim > first;
    A keep[kTile];
    if (dropped) {
      drop.keep(b, h, t, s0, first, lim, keep);
      for (i64 j = first; j < lim; ++j) dprow[j] *= keep[j - first];
    }
    row_softmax_grad(srow, dprow, first, lim, live ? lse_h[t] : A(0), live ? di[i] : A(0));
    if (dropped)
      for (i64 j = first; j < lim; ++j) srow[j] *= keep[j - first];
  }
}

// Backward: di[i] = Σ_d dout·out over row i (rows < n, of `stride` elements
// apart), 0 for the padding rows [n, rows).
template <typename T, typename A>
void dout_dot_out_rows(const T* out, const T* dout, i64 stride, i64 n, i64 rows, i64 D, A* di) {
  for (i64 i = 0; i < rows; ++i) {
    A s = 0;
    if (i < n) {
      const T* o = out + i * stride;
      const T* d_o = dout + i * stride;
#pragma omp simd reduction(+ : s)
      for (i64 d = 0; d < D; ++d) s += load(o[d]) * load(d_o[d]);
    }
    di[i] = s;
  }
}

// Backward: both kinds of task in one parallel region (one fork/join per
// backward), interleaved in proportion so that every contiguous chunk gets a
// similar mix: position i is a dk/dv task when ⌊(i+1)·n_kv/n⌋ > ⌊i·n_kv/n⌋.
// Each thread builds one KvWork and one QWork (its scratch) from g and runs
// kv_task(index, kv_work) / q_task(index, q_work).
template <typename KvWork, typename QWork, typename KvTask, typename QTask>
void for_backward_tasks(const Geometry& g, KvTask&& kv_task, QTask&& q_task) {
  const i64 n_kv = g.B * g.Hkv * g.k_blocks, n_q = g.B * g.H * g.q_blocks, n = n_kv + n_q;
  if (n == 0) return;
  const i64 work_kv = 4 * std::min(kTile, g.S) * g.group * g.queries_per_key() * g.Dp;
  const i64 work_q = 3 * std::min(kTile, g.T) * g.keys_per_query() * g.Dp;
  const i64 grain = task_grain((work_kv * n_kv + work_q * n_q) / n);
  parallel_for(0, n, grain, [&](i64 lo, i64 hi) {
    KvWork kv_work(g);
    QWork q_work(g);
    for (i64 i = lo; i < hi; ++i) {
      const i64 kv_before = i * n_kv / n;
      if ((i + 1) * n_kv / n > kv_before) {
        kv_task(kv_before, kv_work);
      } else {
        q_task(i - kv_before, q_work);
      }
    }
  });
}

}  // namespace trident::kernels::cpu::attention_detail
