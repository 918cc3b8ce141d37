// bf16 attention with AVX512-BF16 dot products (see attention.h for the
// contract). Same tiles, online softmax, task split and fixed summation order
// as attention.cpp, but the tile products run as VDPBF16PS: each instruction
// multiplies 16 lane pairs of bf16 and adds both products into an f32 lane,
// twice the multiply-adds of an f32 FMA. Scores, softmax, lse and every
// accumulator stay f32. Rounded to bf16 is what a bf16 GEMM rounds: the inputs
// (already bf16) and P (Z = P ∘ keep with dropout) and dS before they multiply V, dout, Q and K, as
// FlashAttention does on tensor cores. The scale multiplies the f32 scores
// (and dk, dq on store), so Q enters the products as given.
//
// Operand layouts. C[M×N] += A[M×K]·B[K×N] wants A rows with K contiguous (a
// pair (k, k+1) is one 32-bit broadcast) and B with pairs of rows interleaved,
// Bp[k/2][n][2] ("pairs"):
//   S  = Q·Kᵀ     A: Q rows (D padded to Dp)     Bp: K rows, 32-bit transposed
//   O += P·V      A: P rows, rounded             Bp: V rows interleaved
//   dP = dout·Vᵀ  A: dout rows                   Bp: V rows, 32-bit transposed
//   dV += Pᵀ·dout A: Pᵀ rows (transposed tile)   Bp: dout rows interleaved
//   dK += dSᵀ·Q   A: dSᵀ rows                    Bp: Q rows interleaved
//   dQ += dS·K    A: dS rows                     Bp: K rows interleaved
// Query-block row counts round up to 16 here (padding rows are zero), so the
// 16×16 transposes of P and dS cover whole blocks.
#include "trident/kernels/cpu/attention_tiles.h"

#ifdef TRIDENT_ATTENTION_BF16_DOT

#include <cstring>
#include <vector>

#include "trident/core/parallel.h"

namespace trident::kernels::cpu::attention_detail {

namespace {

// ------------------------------------------------------------ tile product --

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }  // a bit cast between vector types

// C[R × 16·NV] (+)= A·B over `pairs` pairs of k: row r of A at a + r·a_rs
// (bf16, k contiguous), pair p of B at bp + p·ldb (16·NV columns × 2).
template <int R, int NV, bool kAccumulate>
void dot_block(i64 pairs, const bf16* a, i64 a_rs, const bf16* bp, i64 ldb, float* c, i64 ldc) {
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int x = 0; x < NV; ++x) acc[r][x] = kAccumulate ? _mm512_loadu_ps(c + r * ldc + 16 * x) : _mm512_setzero_ps();
  }
  for (i64 p = 0; p < pairs; ++p) {
    __m512i b[NV];
#pragma GCC unroll 4
    for (int x = 0; x < NV; ++x) {
      b[x] = _mm512_loadu_si512(bp + p * ldb + 32 * x);
      asm("" : "+v"(b[x]));  // keep B in registers (as in attention.cpp's f32 block)
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      std::int32_t pair;
      std::memcpy(&pair, a + r * a_rs + 2 * p, sizeof pair);
      const __m512bh av = as_bh(_mm512_set1_epi32(pair));
#pragma GCC unroll 4
      for (int x = 0; x < NV; ++x) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], av, as_bh(b[x]));
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int x = 0; x < NV; ++x) _mm512_storeu_ps(c + r * ldc + 16 * x, acc[r][x]);
  }
}

template <int NV, bool kAccumulate>
void dot_strip(i64 M, i64 pairs, const bf16* a, i64 a_rs, const bf16* bp, i64 ldb, float* c, i64 ldc) {
  i64 m = 0;
  for (; m + 6 <= M; m += 6) dot_block<6, NV, kAccumulate>(pairs, a + m * a_rs, a_rs, bp, ldb, c + m * ldc, ldc);
  if (M - m == 4) dot_block<4, NV, kAccumulate>(pairs, a + m * a_rs, a_rs, bp, ldb, c + m * ldc, ldc);
  if (M - m == 2) dot_block<2, NV, kAccumulate>(pairs, a + m * a_rs, a_rs, bp, ldb, c + m * ldc, ldc);
}

// C[M×N] (+)= A·B for M even and N a multiple of 16; B in pairs of N columns (ldb = 2·N).
template <bool kAccumulate>
void dot_tile(i64 M, i64 N, i64 pairs, const bf16* a, i64 a_rs, const bf16* bp, float* c, i64 ldc) {
  const i64 ldb = 2 * N;
  for (i64 n0 = 0; n0 < N;) {
    const bf16* b = bp + 2 * n0;
    if (N - n0 >= 64) {
      dot_strip<4, kAccumulate>(M, pairs, a, a_rs, b, ldb, c + n0, ldc);
      n0 += 64;
    } else if (N - n0 >= 32) {
      dot_strip<2, kAccumulate>(M, pairs, a, a_rs, b, ldb, c + n0, ldc);
      n0 += 32;
    } else {
      dot_strip<1, kAccumulate>(M, pairs, a, a_rs, b, ldb, c + n0, ldc);
      n0 += 16;
    }
  }
}

// ----------------------------------------------------------------- packing --

// 32 bf16 of a row from column d0, zero at columns ≥ D.
inline __m512i load32(const bf16* row, i64 d0, i64 D) {
  const i64 n = std::clamp<i64>(D - d0, 0, 32);
  const auto keep = static_cast<__mmask32>(n == 32 ? 0xffffffffu : (1u << n) - 1u);
  return _mm512_maskz_loadu_epi16(keep, row + d0);
}

// dst[i·Dp + d] = src[i·stride + d] for i < n, d < D; zero elsewhere up to rows × Dp.
void copy_rows(const bf16* src, i64 stride, i64 n, i64 rows, i64 D, i64 Dp, bf16* dst) {
  for (i64 i = 0; i < rows; ++i) {
    bf16* out = dst + i * Dp;
    for (i64 d0 = 0; d0 < Dp; d0 += 32) {
      const __m512i v = i < n ? load32(src + i * stride, d0, D) : _mm512_setzero_si512();
      const auto keep = static_cast<__mmask32>(Dp - d0 >= 32 ? 0xffffffffu : (1u << (Dp - d0)) - 1u);
      _mm512_mask_storeu_epi16(out + d0, keep, v);
    }
  }
}

// Rows interleaved in pairs: dst[(i/2)·2Dp + 2d + i%2] = src row i, column d
// (i < n, d < D; zero elsewhere), for `rows` rows (even).
void interleave_rows(const bf16* src, i64 stride, i64 n, i64 rows, i64 D, i64 Dp, bf16* dst) {
  alignas(64) std::int16_t lo[32], hi[32];
  for (int j = 0; j < 16; ++j) {
    lo[2 * j] = static_cast<std::int16_t>(j), lo[2 * j + 1] = static_cast<std::int16_t>(32 + j);
    hi[2 * j] = static_cast<std::int16_t>(16 + j), hi[2 * j + 1] = static_cast<std::int16_t>(48 + j);
  }
  const __m512i ilo = _mm512_load_si512(lo), ihi = _mm512_load_si512(hi);
  for (i64 i = 0; i < rows; i += 2) {
    bf16* out = dst + i * Dp;  // pair i/2 starts at (i/2)·2Dp
    for (i64 d0 = 0; d0 < Dp; d0 += 32) {
      const __m512i r0 = i < n ? load32(src + i * stride, d0, D) : _mm512_setzero_si512();
      const __m512i r1 = i + 1 < n ? load32(src + (i + 1) * stride, d0, D) : _mm512_setzero_si512();
      _mm512_storeu_si512(out + 2 * d0, _mm512_permutex2var_epi16(r0, ilo, r1));
      if (Dp - d0 > 16) _mm512_storeu_si512(out + 2 * d0 + 32, _mm512_permutex2var_epi16(r0, ihi, r1));
    }
  }
}

// Column pairs of 64 rows transposed: as 32-bit words, dst[p·64 + i] = the pair
// (src[i][2p], src[i][2p+1]) for rows i < n (zero for i ≥ n, columns ≥ D), p < Dp/2.
void transpose_pairs(const bf16* src, i64 stride, i64 n, i64 D, i64 Dp, bf16* dst) {
  auto* out = reinterpret_cast<float*>(dst);  // 32-bit words moved as floats
  for (i64 i0 = 0; i0 < kTile; i0 += 16) {
    for (i64 p0 = 0; p0 < Dp / 2; p0 += 16) {
      __m512 r[16];
      for (i64 i = 0; i < 16; ++i)
        r[i] = _mm512_castsi512_ps(i0 + i < n ? load32(src + (i0 + i) * stride, 2 * p0, D) : _mm512_setzero_si512());
      transpose16(r);
      for (i64 p = 0; p < 16 && p0 + p < Dp / 2; ++p) _mm512_storeu_ps(out + (p0 + p) * kTile + i0, r[p]);
    }
  }
}

// dst[i·64 + j] = bf16(src[i·64 + j]) for rows i < M.
void round_rows(const float* src, i64 M, bf16* dst) {
  for (i64 i = 0; i < M * kTile; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
    _mm512_storeu_si512(dst + i, (__m512i)v);
  }
}

// dst[j·64 + i] = bf16(src[i·64 + j]) for rows i < M (a multiple of 16), all 64 columns j.
void round_transposed(const float* src, i64 M, bf16* dst) {
  for (i64 i0 = 0; i0 < M; i0 += 16) {
    for (i64 j0 = 0; j0 < kTile; j0 += 16) {
      __m512 r[16];
      for (i64 i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + (i0 + i) * kTile + j0);
      transpose16(r);
      for (i64 j = 0; j < 16; ++j) {
        const __m256bh v = _mm512_cvtneps_pbh(r[j]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (j0 + j) * kTile + i0), (__m256i)v);
      }
    }
  }
}

void scale_rows(float* s, i64 M, float scale) {
  const __m512 f = _mm512_set1_ps(scale);
  for (i64 i = 0; i < M * kTile; i += 16) _mm512_storeu_ps(s + i, _mm512_mul_ps(_mm512_loadu_ps(s + i), f));
}

// The keys and values of one (batch, kv head): per key block, K and V
// transposed in pairs ([Dp/2][64][2], for Q·Kᵀ and dout·Vᵀ) and, for the
// forward, V interleaved ([32][Dp][2], for P·V) or, for dq, K interleaved (dS·K).
// Blocks are packed when first asked for (a windowed task visits only a few).
class HeadPairs {
 public:
  enum Layout { kForward, kGradQ };
  HeadPairs(const Geometry& g, Layout layout)
      : layout_(layout),
        keys_t_(g.k_blocks * g.Dp * kTile),
        values_t_(layout == kGradQ ? g.k_blocks * g.Dp * kTile : 1),
        rows_(g.k_blocks * kTile * g.Dp), packed_(static_cast<std::size_t>(g.k_blocks), 0) {}

  // Packs key blocks [kb_begin, kb_end) of (b, hk) that are not packed yet.
  void pack(const Geometry& g, const bf16* k, const bf16* v, i64 b, i64 hk, i64 kb_begin, i64 kb_end) {
    if (b != b_ || hk != hk_) std::fill(packed_.begin(), packed_.end(), 0);
    b_ = b;
    hk_ = hk;
    for (i64 kb = kb_begin; kb < kb_end; ++kb) {
      if (packed_[static_cast<std::size_t>(kb)] != 0) continue;
      packed_[static_cast<std::size_t>(kb)] = 1;
      const i64 s0 = kb * kTile, nk = std::min(kTile, g.S - s0), at = g.kv_offset(b, s0, hk);
      transpose_pairs(k + at, g.kv_stride(), nk, g.D, g.Dp, keys_t_.get() + kb * g.Dp * kTile);
      if (layout_ == kGradQ) transpose_pairs(v + at, g.kv_stride(), nk, g.D, g.Dp, values_t_.get() + kb * g.Dp * kTile);
      interleave_rows(layout_ == kForward ? v + at : k + at, g.kv_stride(), nk, kTile, g.D, g.Dp,
                      rows_.get() + kb * kTile * g.Dp);
    }
  }
  const bf16* keys_t(const Geometry& g, i64 kb) const { return keys_t_.get() + kb * g.Dp * kTile; }
  const bf16* values_t(const Geometry& g, i64 kb) const { return values_t_.get() + kb * g.Dp * kTile; }
  // V (forward) or K (dq) interleaved.
  const bf16* rows(const Geometry& g, i64 kb) const { return rows_.get() + kb * kTile * g.Dp; }

 private:
  Layout layout_;
  i64 b_ = -1, hk_ = -1;
  Scratch<bf16> keys_t_, values_t_, rows_;
  std::vector<char> packed_;  // per key block of (b_, hk_)
};

// ----------------------------------------------------------------- forward --

void forward(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v, const bf16* mask,
             const void* key_mask, const std::int32_t* doc_starts, bf16* out, float* lse) {
  const Geometry g(dims);
  const HiddenKeys keys(g, key_mask, dims.key_mask_dtype, doc_starts, dims.key_position());
  const ProbsDropout drop(dims);
  const auto scale = static_cast<float>(dims.scale);
  const i64 tasks = g.B * g.H * g.q_blocks;
  const i64 grain = task_grain(2 * std::min(kTile, g.T) * g.keys_per_query() * g.Dp);
  parallel_for(0, tasks, grain, [&](i64 lo, i64 hi) {
    HeadPairs head(g, HeadPairs::kForward);
    Scratch<bf16> qs(kTile * g.Dp), p(kTile * kTile);
    Scratch<float> sc(kTile * kTile), acc(kTile * g.Dp);
    float running_max[kTile], running_sum[kTile];
    for (i64 task = lo; task < hi; ++task) {
      const i64 qb = task % g.q_blocks, h = (task / g.q_blocks) % g.H, b = task / (g.q_blocks * g.H);
      const i64 t0 = qb * kTile, nq = std::min(kTile, g.T - t0), M = round_up(nq, 16);
      const auto [kb_begin, kb_end] = key_blocks(g, keys, b, t0, nq);
      copy_rows(q + g.q_offset(b, t0, h), g.q_stride(), nq, M, g.D, g.Dp, qs.get());
      std::fill_n(acc.get(), M * g.Dp, 0.0f);
      std::fill_n(running_max, kTile, kNegInf<float>);
      std::fill_n(running_sum, kTile, 0.0f);
      for (i64 kb = kb_begin; kb < kb_end; ++kb) {
        if (!keys.tile_has_keys(b, kb)) continue;  // padding only: adds nothing
        const i64 s0 = kb * kTile, nk = std::min(kTile, g.S - s0);
        head.pack(g, k, v, b, h / g.group, kb, kb + 1);
        dot_tile<false>(M, kTile, g.Dp / 2, qs.get(), g.Dp, head.keys_t(g, kb), sc.get(), kTile);
        scale_rows(sc.get(), M, scale);
        online_softmax_tile(g, mask, keys, drop, b, h, t0, nq, M, s0, nk, sc.get(), running_max, running_sum,
                            acc.get());
        round_rows(sc.get(), M, p.get());
        dot_tile<true>(M, g.Dp, kTile / 2, p.get(), kTile, head.rows(g, kb), acc.get(), g.Dp);
      }
      store_output_rows(g, acc.get(), running_max, running_sum, b, h, t0, nq, out, lse);
    }
  });
}

// ---------------------------------------------------------------- backward --

struct Args {
  const bf16 *q, *k, *v, *mask, *out, *dout;
  const float* lse;
  bf16 *dq, *dk, *dv;
  float scale;
  const HiddenKeys* keys;
  const ProbsDropout* drop;
};

// The query side for `heads` consecutive heads from row t0 (rows past T zero):
// Q and dout rows (A of the score products), Di = Σ dout·out, and for the dk/dv
// tasks Q and dout interleaved (B of dSᵀ·Q and Pᵀ·dout).
class QueryRows {
 public:
  QueryRows(const Geometry& g, i64 heads, i64 rows, bool interleaved)
      : heads_(heads), rows_(rows), interleaved_(interleaved), q_(heads * rows * g.Dp), dout_(heads * rows * g.Dp),
        q_pairs_(interleaved ? heads * rows * g.Dp : 1), dout_pairs_(interleaved ? heads * rows * g.Dp : 1),
        di_(heads * rows) {}

  void pack(const Geometry& g, const Args& a, i64 b, i64 h0, i64 t0) {
    if (b == b_ && h0 == h0_ && t0 == t0_) return;
    const i64 n = std::clamp<i64>(g.T - t0, 0, rows_);
    for (i64 j = 0; j < heads_; ++j) {
      const i64 at = g.q_offset(b, t0, h0 + j), off = j * rows_ * g.Dp;
      copy_rows(a.q + at, g.q_stride(), n, rows_, g.D, g.Dp, q_.get() + off);
      copy_rows(a.dout + at, g.q_stride(), n, rows_, g.D, g.Dp, dout_.get() + off);
      if (interleaved_) {
        interleave_rows(a.q + at, g.q_stride(), n, rows_, g.D, g.Dp, q_pairs_.get() + off);
        interleave_rows(a.dout + at, g.q_stride(), n, rows_, g.D, g.Dp, dout_pairs_.get() + off);
      }
      dout_dot_out_rows(a.out + at, a.dout + at, g.q_stride(), n, rows_, g.D, di_.get() + j * rows_);
    }
    b_ = b;
    h0_ = h0;
    t0_ = t0;
  }
  // Row r (relative to t0, a multiple of 16 for the pairs) of head h0 + j.
  const bf16* q(const Geometry& g, i64 j, i64 r) const { return q_.get() + (j * rows_ + r) * g.Dp; }
  const bf16* dout(const Geometry& g, i64 j, i64 r) const { return dout_.get() + (j * rows_ + r) * g.Dp; }
  const bf16* q_pairs(const Geometry& g, i64 j, i64 r) const { return q_pairs_.get() + (j * rows_ + r) * g.Dp; }
  const bf16* dout_pairs(const Geometry& g, i64 j, i64 r) const {
    return dout_pairs_.get() + (j * rows_ + r) * g.Dp;
  }
  const float* di(i64 j, i64 r) const { return di_.get() + j * rows_ + r; }

 private:
  i64 heads_, rows_;
  bool interleaved_;
  i64 b_ = -1, h0_ = -1, t0_ = -1;
  Scratch<bf16> q_, dout_, q_pairs_, dout_pairs_;
  Scratch<float> di_;
};

// S·scale and dZ of one tile of sample b and head h from packed rows, turned into P (Z with dropout) and
// dS (f32).
void tile_softmax_grad(const Geometry& g, const Args& a, i64 b, i64 h, const bf16* q_rows, const bf16* dout_rows,
                       const float* di, const bf16* keys_t, const bf16* values_t, const float* lse_h, i64 t0, i64 nq,
                       i64 M, i64 s0, i64 nk, float* s, float* dp) {
  dot_tile<false>(M, kTile, g.Dp / 2, q_rows, g.Dp, keys_t, s, kTile);
  scale_rows(s, M, a.scale);
  dot_tile<false>(M, kTile, g.Dp / 2, dout_rows, g.Dp, values_t, dp, kTile);
  softmax_grad_rows(g, a.mask, *a.keys, *a.drop, b, h, lse_h, di, t0, nq, M, s0, nk, s, dp);
}

// Stores rows [0, n) of an f32 [· × Dp] accumulator times `factor` into
// rows [s0, s0 + n) of kv head hk (dk, dv) or query rows of head h (dq).
void store_rows(const float* src, i64 n, i64 D, i64 Dp, float factor, bf16* dst, i64 dst_stride) {
  for (i64 i = 0; i < n; ++i)
    for (i64 d = 0; d < D; ++d) dst[i * dst_stride + d] = store<bf16>(src[i * Dp + d] * factor);
}

struct KvWork {
  explicit KvWork(const Geometry& g)
      : keys_t(g.Dp * kTile), values_t(g.Dp * kTile), pt(kTile * kTile), dst(kTile * kTile), s(kTile * kTile),
        dp(kTile * kTile), dk(kTile * g.Dp), dv(kTile * g.Dp), queries(g, g.group, g.q_blocks * kTile, true) {}
  Scratch<bf16> keys_t, values_t, pt, dst;
  Scratch<float> s, dp, dk, dv;
  QueryRows queries;
};

// dk, dv of one (b, kv head, key block): Σ over the group's heads and query blocks.
void backward_kv_task(const Geometry& g, const Args& a, i64 task, KvWork& w) {
  const i64 kb = task % g.k_blocks, hk = (task / g.k_blocks) % g.Hkv, b = task / (g.k_blocks * g.Hkv);
  const i64 s0 = kb * kTile, nk = std::min(kTile, g.S - s0), Mk = round_up(nk, 2);
  std::fill_n(w.dk.get(), Mk * g.Dp, 0.0f);
  std::fill_n(w.dv.get(), Mk * g.Dp, 0.0f);
  // The queries that see a key of the tile; none when it holds padding only (dk = dv = 0).
  const auto [t_first, t_end] = queries_seeing(g, *a.keys, b, kb, nk);
  if (t_first < t_end) {
    transpose_pairs(a.k + g.kv_offset(b, s0, hk), g.kv_stride(), nk, g.D, g.Dp, w.keys_t.get());
    transpose_pairs(a.v + g.kv_offset(b, s0, hk), g.kv_stride(), nk, g.D, g.Dp, w.values_t.get());
    w.queries.pack(g, a, b, hk * g.group, 0);
  }
  for (i64 h = hk * g.group; h < (hk + 1) * g.group; ++h) {
    const i64 j = h - hk * g.group;
    const float* lse_h = a.lse + (b * g.H + h) * g.T;
    for (i64 qb = t_first / kTile; qb * kTile < t_end; ++qb) {
      const i64 t0 = qb * kTile, nq = std::min(kTile, g.T - t0), M = round_up(nq, 16);
      tile_softmax_grad(g, a, b, h, w.queries.q(g, j, t0), w.queries.dout(g, j, t0), w.queries.di(j, t0), w.keys_t.get(),
                        w.values_t.get(), lse_h, t0, nq, M, s0, nk, w.s.get(), w.dp.get());
      round_transposed(w.s.get(), M, w.pt.get());
      round_transposed(w.dp.get(), M, w.dst.get());
      // dV += Pᵀ·dout, dK += dSᵀ·Q over the block's M queries (M/2 pairs).
      dot_tile<true>(Mk, g.Dp, M / 2, w.pt.get(), kTile, w.queries.dout_pairs(g, j, t0), w.dv.get(), g.Dp);
      dot_tile<true>(Mk, g.Dp, M / 2, w.dst.get(), kTile, w.queries.q_pairs(g, j, t0), w.dk.get(), g.Dp);
    }
  }
  store_rows(w.dk.get(), nk, g.D, g.Dp, a.scale, a.dk + g.kv_offset(b, s0, hk), g.kv_stride());
  store_rows(w.dv.get(), nk, g.D, g.Dp, 1.0f, a.dv + g.kv_offset(b, s0, hk), g.kv_stride());
}

struct QWork {
  explicit QWork(const Geometry& g)
      : head(g, HeadPairs::kGradQ), ds(kTile * kTile), s(kTile * kTile), dp(kTile * kTile), dq(kTile * g.Dp),
        queries(g, 1, kTile, false) {}
  HeadPairs head;
  Scratch<bf16> ds;
  Scratch<float> s, dp, dq;
  QueryRows queries;
};

// dq of one (b, head, query block): Σ over key blocks.
void backward_q_task(const Geometry& g, const Args& a, i64 task, QWork& w) {
  const i64 qb = task % g.q_blocks, h = (task / g.q_blocks) % g.H, b = task / (g.q_blocks * g.H);
  const i64 t0 = qb * kTile, nq = std::min(kTile, g.T - t0), M = round_up(nq, 16);
  const float* lse_h = a.lse + (b * g.H + h) * g.T;
  const auto [kb_begin, kb_end] = key_blocks(g, *a.keys, b, t0, nq);
  std::fill_n(w.dq.get(), M * g.Dp, 0.0f);
  if (kb_begin < kb_end) w.queries.pack(g, a, b, h, t0);
  for (i64 kb = kb_begin; kb < kb_end; ++kb) {
    if (!a.keys->tile_has_keys(b, kb)) continue;  // padding only: dS = 0
    const i64 s0 = kb * kTile, nk = std::min(kTile, g.S - s0);
    w.head.pack(g, a.k, a.v, b, h / g.group, kb, kb + 1);
    tile_softmax_grad(g, a, b, h, w.queries.q(g, 0, 0), w.queries.dout(g, 0, 0), w.queries.di(0, 0), w.head.keys_t(g, kb),
                      w.head.values_t(g, kb), lse_h, t0, nq, M, s0, nk, w.s.get(), w.dp.get());
    round_rows(w.dp.get(), M, w.ds.get());
    dot_tile<true>(M, g.Dp, kTile / 2, w.ds.get(), kTile, w.head.rows(g, kb), w.dq.get(), g.Dp);
  }
  store_rows(w.dq.get(), nq, g.D, g.Dp, a.scale, a.dq + g.q_offset(b, t0, h), g.q_stride());
}

void backward(const Geometry& g, const Args& a) {
  for_backward_tasks<KvWork, QWork>(
      g, [&](i64 task, KvWork& w) { backward_kv_task(g, a, task, w); },
      [&](i64 task, QWork& w) { backward_q_task(g, a, task, w); });
}

}  // namespace

void attention_forward_bf16(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v, const bf16* mask,
                            const void* key_mask, const std::int32_t* doc_starts, bf16* out, float* lse) {
  forward(dims, q, k, v, mask, key_mask, doc_starts, out, lse);
}

void attention_backward_bf16(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v, const bf16* mask,
                             const void* key_mask, const std::int32_t* doc_starts, const bf16* out, const float* lse,
                             const bf16* dout, bf16* dq, bf16* dk, bf16* dv) {
  const Geometry g(dims);
  const HiddenKeys keys(g, key_mask, dims.key_mask_dtype, doc_starts, dims.key_position());
  const ProbsDropout drop(dims);
  backward(g, Args{q, k, v, mask, out, dout, lse, dq, dk, dv, static_cast<float>(dims.scale), &keys, &drop});
}

}  // namespace trident::kernels::cpu::attention_detail

#endif  // TRIDENT_ATTENTION_BF16_DOT
