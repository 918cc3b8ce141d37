// Flash-style attention on the CPU (see attention.h for the contract).
//
// Data movement. Every product runs on acc_t copies ("packs") of the inputs:
// rows [n × Dp] (Dp = D rounded up to 16, padding zero; Q pre-multiplied by the
// scale) and transposed key/value blocks [D × 64]. A thread packs what a run of
// its tasks shares once: the keys and values of one (batch, kv head) for the
// forward and dq tasks (HeadPack), every query row of a kv head's group for
// the dk/dv tasks (QueryPack). So the transposes cost O(S·D) per head, not per
// tile.
//
// Arithmetic. One register-blocked tile product, C[M×N] (+)= A·B with A read
// through row/column strides (so Pᵀ·dO needs no transpose), does all the
// FLOPs: AVX-512 f32 blocks of 6 rows × 64 columns (24 accumulators, the four
// B vectors of each k held in registers); elsewhere (f64, other ISAs) 4-row
// loops the compiler vectorises. Score tiles are [queries × keys], 64 × 64.
//
// Forward: online softmax per query row (running max m and sum l; the output
// accumulator is rescaled by exp(m_old − m_new) when the max grows); with
// dropout, each row of exp(s − m) is multiplied by its keep factors before ·V.
// Backward: S is recomputed from Q, K and lse, P = exp(S − lse),
// dS = P ∘ (dP − Di) with Di = Σ dout·out; dk/dv tasks (b, kv head, key block)
// sum over the group's heads and query blocks in order, dq tasks (b, head,
// query block) over key blocks in order. Each task owns its outputs, and both
// kinds run in one parallel region.
#include "trident/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/kernels/cpu/attention_gemm.h"
#include "trident/kernels/cpu/attention_tiles.h"
#include "trident/kernels/cpu/exp.h"
#include "trident/kernels/cpu/softmax.h"

namespace trident::kernels::cpu {

namespace {

using namespace attention_detail;

// ---------------------------------------------------------------------------
// Packing.

// dst[i·Dp + d] = src[i·stride + d]·factor for i < n, d < D; zero for d ∈ [D, Dp) and rows i ∈ [n, rows).
template <typename T, typename A>
void pack_rows(const T* src, i64 stride, i64 n, i64 rows, i64 D, i64 Dp, A factor, A* dst) {
  for (i64 i = 0; i < rows; ++i) {
    A* out = dst + i * Dp;
    if (i < n) {
      const T* in = src + i * stride;
      for (i64 d = 0; d < D; ++d) out[d] = load(in[d]) * factor;
      for (i64 d = D; d < Dp; ++d) out[d] = A(0);
    } else {
      for (i64 d = 0; d < Dp; ++d) out[d] = A(0);
    }
  }
}

// dst[d·kTile + i] = src[i·stride + d] for i < n, d < D; columns i ∈ [n, kTile) zero.
template <typename T, typename A>
void pack_cols(const T* src, i64 stride, i64 n, i64 D, A* dst) {
#ifdef TRIDENT_ATTENTION_VECTOR_PACK
  if constexpr (std::is_same_v<A, float>) {
    // 16×16 blocks: masked row loads (rows past n and columns past D read as 0), transpose, store.
    for (i64 i0 = 0; i0 < kTile; i0 += 16) {
      for (i64 d0 = 0; d0 < D; d0 += 16) {
        const auto cols = static_cast<__mmask16>((1u << std::min<i64>(D - d0, 16)) - 1u);
        __m512 r[16];
        for (i64 i = 0; i < 16; ++i)
          r[i] = i0 + i < n ? load_f32x16(src + (i0 + i) * stride + d0, cols) : _mm512_setzero_ps();
        transpose16(r);
        for (i64 d = 0; d < 16 && d0 + d < D; ++d) _mm512_storeu_ps(dst + (d0 + d) * kTile + i0, r[d]);
      }
    }
    return;
  }
#endif
  for (i64 d = 0; d < D; ++d) {
    A* out = dst + d * kTile;
    for (i64 i = 0; i < n; ++i) out[i] = load(src[i * stride + d]);
    for (i64 i = n; i < kTile; ++i) out[i] = A(0);
  }
}

// The keys and values of one (batch, kv head), packed for the forward pass
// (transposed keys, value rows) or the dq pass (transposed keys and values, key rows).
// Blocks are packed when first asked for, so a windowed or decoding task packs
// only the key blocks it visits.
template <typename A>
class HeadPack {
 public:
  enum Layout { kForward, kGradQ };
  HeadPack(const Geometry& g, Layout layout)
      : layout_(layout), keys_t_(g.k_blocks * g.D * kTile), second_(layout == kForward ? g.k_blocks * kTile * g.Dp
                                                                                         : g.k_blocks * g.D * kTile),
        key_rows_(layout == kGradQ ? g.k_blocks * kTile * g.Dp : 1),
        packed_(static_cast<std::size_t>(g.k_blocks), 0) {}

  // Packs key blocks [kb_begin, kb_end) of (b, hk) that are not packed yet.
  template <typename T>
  void pack(const Geometry& g, const T* k, const T* v, i64 b, i64 hk, i64 kb_begin, i64 kb_end) {
    if (b != b_ || hk != hk_) std::fill(packed_.begin(), packed_.end(), 0);
    b_ = b;
    hk_ = hk;
    for (i64 kb = kb_begin; kb < kb_end; ++kb) {
      if (packed_[static_cast<std::size_t>(kb)] != 0) continue;
      packed_[static_cast<std::size_t>(kb)] = 1;
      const i64 s0 = kb * kTile, nk = std::min(kTile, g.S - s0);
      const T* kr = k + g.kv_offset(b, s0, hk);
      const T* vr = v + g.kv_offset(b, s0, hk);
      pack_cols(kr, g.kv_stride(), nk, g.D, keys_t_.get() + kb * g.D * kTile);
      if (layout_ == kForward) {
        pack_rows(vr, g.kv_stride(), nk, kTile, g.D, g.Dp, A(1), second_.get() + kb * kTile * g.Dp);
      } else {
        pack_cols(vr, g.kv_stride(), nk, g.D, second_.get() + kb * g.D * kTile);
        pack_rows(kr, g.kv_stride(), nk, kTile, g.D, g.Dp, A(1), key_rows_.get() + kb * kTile * g.Dp);
      }
    }
  }
  // [D × 64] transposed keys of block kb.
  const A* keys_t(const Geometry& g, i64 kb) const { return keys_t_.get() + kb * g.D * kTile; }
  // Forward: [64 × Dp] value rows of block kb.
  const A* value_rows(const Geometry& g, i64 kb) const { return second_.get() + kb * kTile * g.Dp; }
  // dq pass: [D × 64] transposed values and [64 × Dp] key rows of block kb.
  const A* values_t(const Geometry& g, i64 kb) const { return second_.get() + kb * g.D * kTile; }
  const A* key_rows(const Geometry& g, i64 kb) const { return key_rows_.get() + kb * kTile * g.Dp; }

 private:
  Layout layout_;
  i64 b_ = -1, hk_ = -1;
  Scratch<A> keys_t_, second_, key_rows_;
  std::vector<char> packed_;  // per key block of (b_, hk_)
};

// ---------------------------------------------------------------------------
// Forward.

template <typename T>
void forward_impl(const AttentionDims& dims, const T* q, const T* k, const T* v, const T* mask, const void* key_mask,
                  const std::int32_t* doc_starts, T* out, acc_t<T>* lse) {
  using A = acc_t<T>;
  const Geometry g(dims);
  const HiddenKeys keys(g, key_mask, dims.key_mask_dtype, doc_starts, dims.key_position());
  const ProbsDropout drop(dims);
  const A scale = static_cast<A>(dims.scale);
  const i64 tasks = g.B * g.H * g.q_blocks;
  const i64 grain = task_grain(2 * std::min(kTile, g.T) * g.keys_per_query() * g.Dp);
  parallel_for(0, tasks, grain, [&](i64 lo, i64 hi) {
    HeadPack<A> head(g, HeadPack<A>::kForward);
    Scratch<A> qs(kTile * g.Dp), sc(kTile * kTile), acc(kTile * g.Dp);
    A running_max[kTile], running_sum[kTile];
    for (i64 task = lo; task < hi; ++task) {
      const i64 qb = task % g.q_blocks, h = (task / g.q_blocks) % g.H, b = task / (g.q_blocks * g.H);
      const i64 t0 = qb * kTile, nq = std::min(kTile, g.T - t0), M = round_up(nq, kRows);
      const auto [kb_begin, kb_end] = key_blocks(g, keys, b, t0, nq);
      pack_rows(q + g.q_offset(b, t0, h), g.q_stride(), nq, M, g.D, g.Dp, scale, qs.get());
      std::fill_n(acc.get(), M * g.Dp, A(0));
      std::fill_n(running_max, kTile, kNegInf<A>);
      std::fill_n(running_sum, kTile, A(0));
      for (i64 kb = kb_begin; kb < kb_end; ++kb) {
        if (!keys.tile_has_keys(b, kb)) continue;  // padding only: adds nothing
        const i64 s0 = kb * kTile, nk = std::min(kTile, g.S - s0);
        head.pack(g, k, v, b, h / g.group, kb, kb + 1);
        gemm_tile<A, false>(M, kTile, g.D, qs.get(), g.Dp, 1, head.keys_t(g, kb), kTile, sc.get(), kTile);
        online_softmax_tile(g, mask, keys, drop, b, h, t0, nq, M, s0, nk, sc.get(), running_max, running_sum,
                            acc.get());
        gemm_tile<A, true>(M, g.Dp, nk, sc.get(), kTile, 1, head.value_rows(g, kb), g.Dp, acc.get(), g.Dp);
      }
      store_output_rows(g, acc.get(), running_max, running_sum, b, h, t0, nq, out, lse);
    }
  });
}

// ---------------------------------------------------------------------------
// Backward.

template <typename T>
struct BackwardArgs {
  const T *q, *k, *v, *mask, *out, *dout;
  const acc_t<T>* lse;
  T *dq, *dk, *dv;
  acc_t<T> scale;
  const HiddenKeys* keys;
  const ProbsDropout* drop;
};

// The query side of the backward, packed: Q·scale and dout rows [rows × Dp]
// and Di = Σ dout·out, for `heads` consecutive heads from row t0 (rows past T
// are zero). dk/dv tasks pack every query row of their kv head's group once per
// (b, kv head); dq tasks pack their own query block.
template <typename A>
class QueryPack {
 public:
  QueryPack(const Geometry& g, i64 heads, i64 rows)
      : heads_(heads), rows_(rows), q_(heads * rows * g.Dp), dout_(heads * rows * g.Dp), di_(heads * rows) {}

  // Packs heads [h0, h0 + heads) of batch b from row t0, unless already packed.
  template <typename T>
  void pack(const Geometry& g, const BackwardArgs<T>& a, i64 b, i64 h0, i64 t0) {
    if (b == b_ && h0 == h0_ && t0 == t0_) return;
    const i64 n = std::clamp<i64>(g.T - t0, 0, rows_);
    for (i64 j = 0; j < heads_; ++j) {
      const i64 at = g.q_offset(b, t0, h0 + j);
      pack_rows(a.q + at, g.q_stride(), n, rows_, g.D, g.Dp, a.scale, q_.get() + j * rows_ * g.Dp);
      pack_rows(a.dout + at, g.q_stride(), n, rows_, g.D, g.Dp, A(1), dout_.get() + j * rows_ * g.Dp);
      dout_dot_out_rows(a.out + at, a.dout + at, g.q_stride(), n, rows_, g.D, di_.get() + j * rows_);
    }
    b_ = b;
    h0_ = h0;
    t0_ = t0;
  }
  // Row r (relative to t0) of head h0 + j.
  const A* q(const Geometry& g, i64 j, i64 r) const { return q_.get() + (j * rows_ + r) * g.Dp; }
  const A* dout(const Geometry& g, i64 j, i64 r) const { return dout_.get() + (j * rows_ + r) * g.Dp; }
  const A* di(i64 j, i64 r) const { return di_.get() + j * rows_ + r; }

 private:
  i64 heads_, rows_;
  i64 b_ = -1, h0_ = -1, t0_ = -1;
  Scratch<A> q_, dout_, di_;
};

// Scores S = Q·Kᵀ and dZ = dout·Vᵀ of one tile of sample b and head h, turned in place into P (Z with
// dropout) and dS (hidden entries, padding keys, padding rows and rows with no visible key give 0).
template <typename T>
void tile_softmax_grad(const Geometry& g, const BackwardArgs<T>& a, i64 b, i64 h, const acc_t<T>* q_rows,
                       const acc_t<T>* dout_rows, const acc_t<T>* di, const acc_t<T>* keys_t, const acc_t<T>* values_t,
                       const acc_t<T>* lse_h, i64 t0, i64 nq, i64 M, i64 s0, i64 nk, acc_t<T>* s, acc_t<T>* dp) {
  using A = acc_t<T>;
  gemm_tile<A, false>(M, kTile, g.D, q_rows, g.Dp, 1, keys_t, kTile, s, kTile);
  gemm_tile<A, false>(M, kTile, g.D, dout_rows, g.Dp, 1, values_t, kTile, dp, kTile);
  softmax_grad_rows(g, a.mask, *a.keys, *a.drop, b, h, lse_h, di, t0, nq, M, s0, nk, s, dp);
}

// Per-thread scratch of the dk/dv tasks.
template <typename A>
struct KvScratch {
  explicit KvScratch(const Geometry& g)
      : keys_t(g.D * kTile), values_t(g.D * kTile), p(kTile * kTile), ds(kTile * kTile), dk(kTile * g.Dp),
        dv(kTile * g.Dp), queries(g, g.group, g.q_blocks * kTile) {}
  Scratch<A> keys_t, values_t, p, ds, dk, dv;
  QueryPack<A> queries;
};

// dk, dv of one (b, kv head, key block).
template <typename T>
void backward_kv_task(const Geometry& g, const BackwardArgs<T>& a, i64 task, KvScratch<acc_t<T>>& w) {
  using A = acc_t<T>;
  const i64 kb = task % g.k_blocks, hk = (task / g.k_blocks) % g.Hkv, b = task / (g.k_blocks * g.Hkv);
  const i64 s0 = kb * kTile, nk = std::min(kTile, g.S - s0), Mk = round_up(nk, kRows);
  std::fill_n(w.dk.get(), Mk * g.Dp, A(0));
  std::fill_n(w.dv.get(), Mk * g.Dp, A(0));
  // Only queries [t_first, t_end) see a key of this tile (none when it holds padding only: dk = dv = 0).
  const auto [t_first, t_end] = queries_seeing(g, *a.keys, b, kb, nk);
  if (t_first < t_end) {
    pack_cols(a.k + g.kv_offset(b, s0, hk), g.kv_stride(), nk, g.D, w.keys_t.get());
    pack_cols(a.v + g.kv_offset(b, s0, hk), g.kv_stride(), nk, g.D, w.values_t.get());
    w.queries.pack(g, a, b, hk * g.group, 0);
  }
  for (i64 h = hk * g.group; h < (hk + 1) * g.group; ++h) {
    const i64 j = h - hk * g.group;
    const A* lse_h = a.lse + (b * g.H + h) * g.T;
    for (i64 qb = t_first / kTile; qb * kTile < t_end; ++qb) {
      const i64 t0 = qb * kTile, nq = std::min(kTile, g.T - t0), M = round_up(nq, kRows);
      const A* q_rows = w.queries.q(g, j, t0);
      const A* dout_rows = w.queries.dout(g, j, t0);
      tile_softmax_grad(g, a, b, h, q_rows, dout_rows, w.queries.di(j, t0), w.keys_t.get(), w.values_t.get(), lse_h, t0,
                        nq, M, s0, nk, w.p.get(), w.ds.get());
      // dV += Pᵀ·dout and dK += dSᵀ·(Q·scale): A read column-wise (row stride 1, k stride 64).
      gemm_tile<A, true>(Mk, g.Dp, nq, w.p.get(), 1, kTile, dout_rows, g.Dp, w.dv.get(), g.Dp);
      gemm_tile<A, true>(Mk, g.Dp, nq, w.ds.get(), 1, kTile, q_rows, g.Dp, w.dk.get(), g.Dp);
    }
  }
  for (i64 j = 0; j < nk; ++j) {
    T* dkr = a.dk + g.kv_offset(b, s0 + j, hk);
    T* dvr = a.dv + g.kv_offset(b, s0 + j, hk);
    const A* dks = w.dk.get() + j * g.Dp;
    const A* dvs = w.dv.get() + j * g.Dp;
    for (i64 d = 0; d < g.D; ++d) {
      dkr[d] = store<T>(dks[d]);
      dvr[d] = store<T>(dvs[d]);
    }
  }
}

// Per-thread scratch of the dq tasks.
template <typename A>
struct QScratch {
  explicit QScratch(const Geometry& g)
      : head(g, HeadPack<A>::kGradQ), s(kTile * kTile), ds(kTile * kTile), dq(kTile * g.Dp), queries(g, 1, kTile) {}
  HeadPack<A> head;
  Scratch<A> s, ds, dq;
  QueryPack<A> queries;
};

// dq of one (b, head, query block).
template <typename T>
void backward_q_task(const Geometry& g, const BackwardArgs<T>& a, i64 task, QScratch<acc_t<T>>& w) {
  using A = acc_t<T>;
  const i64 qb = task % g.q_blocks, h = (task / g.q_blocks) % g.H, b = task / (g.q_blocks * g.H);
  const i64 t0 = qb * kTile, nq = std::min(kTile, g.T - t0), M = round_up(nq, kRows);
  const A* lse_h = a.lse + (b * g.H + h) * g.T;
  const auto [kb_begin, kb_end] = key_blocks(g, *a.keys, b, t0, nq);
  std::fill_n(w.dq.get(), M * g.Dp, A(0));
  if (kb_begin < kb_end) w.queries.pack(g, a, b, h, t0);
  for (i64 kb = kb_begin; kb < kb_end; ++kb) {
    if (!a.keys->tile_has_keys(b, kb)) continue;  // padding only: dS = 0
    const i64 s0 = kb * kTile, nk = std::min(kTile, g.S - s0);
    w.head.pack(g, a.k, a.v, b, h / g.group, kb, kb + 1);
    tile_softmax_grad(g, a, b, h, w.queries.q(g, 0, 0), w.queries.dout(g, 0, 0), w.queries.di(0, 0), w.head.keys_t(g, kb),
                      w.head.values_t(g, kb), lse_h, t0, nq, M, s0, nk, w.s.get(), w.ds.get());
    gemm_tile<A, true>(M, g.Dp, nk, w.ds.get(), kTile, 1, w.head.key_rows(g, kb), g.Dp, w.dq.get(), g.Dp);
  }
  for (i64 i = 0; i < nq; ++i) {
    T* dst = a.dq + g.q_offset(b, t0 + i, h);
    const A* src = w.dq.get() + i * g.Dp;
    for (i64 d = 0; d < g.D; ++d) dst[d] = store<T>(src[d] * a.scale);
  }
}

template <typename T>
void backward_impl(const Geometry& g, const BackwardArgs<T>& a) {
  using A = acc_t<T>;
  for_backward_tasks<KvScratch<A>, QScratch<A>>(
      g, [&](i64 task, KvScratch<A>& w) { backward_kv_task(g, a, task, w); },
      [&](i64 task, QScratch<A>& w) { backward_q_task(g, a, task, w); });
}

// One task per (b, h) of the accumulators; each row's merge is independent, so the result does not
// depend on the thread count.
template <typename T>
void merge_impl(const AttentionMergeDims& d, acc_t<T>* out, acc_t<T>* lse, const T* part_out,
                const acc_t<T>* part_lse) {
  using A = acc_t<T>;
  const i64 H = d.heads, D = d.head_dim, P = d.part_rows;
  parallel_for(0, d.batch * H, 1, [&](i64 lo, i64 hi) {
    for (i64 task = lo; task < hi; ++task) {
      const i64 b = task / H, h = task % H;
      for (i64 t = 0; t < P; ++t) {
        const i64 row = d.row_begin + t;
        A& l = lse[(b * H + h) * d.rows + row];
        const A pl = part_lse[(b * H + h) * P + t];
        const A m = std::max(l, pl);
        if (m == -std::numeric_limits<A>::infinity()) continue;
        const A wa = exp_acc(l - m), wb = exp_acc(pl - m), sum = wa + wb;
        const A fa = wa / sum, fb = wb / sum;
        A* o = out + ((b * d.rows + row) * H + h) * D;
        const T* po = part_out + ((b * P + t) * H + h) * D;
        for (i64 i = 0; i < D; ++i) o[i] = fa * o[i] + fb * static_cast<A>(po[i]);
        l = m + std::log(sum);
      }
    }
  });
}

}  // namespace

bool attention_uses_bf16_dot_products() noexcept {
#ifdef TRIDENT_ATTENTION_BF16_DOT
  return true;
#else
  return false;
#endif
}

void attention_forward(DType dtype, const AttentionDims& dims, const void* q, const void* k, const void* v,
                       const void* mask, const void* key_mask, const std::int32_t* doc_starts, void* out, void* lse) {
  if (dims.layout.blocks != nullptr) {
    block_sparse_attention_forward(dtype, dims, q, k, v, key_mask, out, lse);
    return;
  }
#ifdef TRIDENT_ATTENTION_BF16_DOT
  if (dtype == DType::bf16) {
    attention_forward_bf16(dims, static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v),
                           static_cast<const bf16*>(mask), key_mask, doc_starts, static_cast<bf16*>(out),
                           static_cast<float*>(lse));
    return;
  }
#endif
  TRIDENT_DISPATCH_FLOAT(dtype, "attention", [&] {
    forward_impl(dims, static_cast<const scalar_t*>(q), static_cast<const scalar_t*>(k),
                 static_cast<const scalar_t*>(v), static_cast<const scalar_t*>(mask), key_mask, doc_starts,
                 static_cast<scalar_t*>(out), static_cast<acc_t<scalar_t>*>(lse));
  });
}

void attention_backward(DType dtype, const AttentionDims& dims, const void* q, const void* k, const void* v,
                        const void* mask, const void* key_mask, const std::int32_t* doc_starts, const void* out,
                        const void* lse, const void* dout, void* dq, void* dk, void* dv) {
  if (dims.layout.blocks != nullptr) {
    block_sparse_attention_backward(dtype, dims, q, k, v, key_mask, out, lse, dout, dq, dk, dv);
    return;
  }
#ifdef TRIDENT_ATTENTION_BF16_DOT
  if (dtype == DType::bf16) {
    attention_backward_bf16(dims, static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v),
                            static_cast<const bf16*>(mask), key_mask, doc_starts, static_cast<const bf16*>(out),
                            static_cast<const float*>(lse), static_cast<const bf16*>(dout), static_cast<bf16*>(dq),
                            static_cast<bf16*>(dk), static_cast<bf16*>(dv));
    return;
  }
#endif
  TRIDENT_DISPATCH_FLOAT(dtype, "attention_backward", [&] {
    using T = scalar_t;
    const Geometry g(dims);
    const HiddenKeys keys(g, key_mask, dims.key_mask_dtype, doc_starts, dims.key_position());
    const ProbsDropout drop(dims);
    const BackwardArgs<T> args{static_cast<const T*>(q),
                               static_cast<const T*>(k),
                               static_cast<const T*>(v),
                               static_cast<const T*>(mask),
                               static_cast<const T*>(out),
                               static_cast<const T*>(dout),
                               static_cast<const acc_t<T>*>(lse),
                               static_cast<T*>(dq),
                               static_cast<T*>(dk),
                               static_cast<T*>(dv),
                               static_cast<acc_t<T>>(dims.scale),
                               &keys,
                               &drop};
    backward_impl(g, args);
  });
}

void attention_merge(DType dtype, const AttentionMergeDims& dims, void* out, void* lse, const void* part_out,
                     const void* part_lse) {
  TRIDENT_DISPATCH_FLOAT(dtype, "attention_merge", [&] {
    using A = acc_t<scalar_t>;
    merge_impl<scalar_t>(dims, static_cast<A*>(out), static_cast<A*>(lse), static_cast<const scalar_t*>(part_out),
                         static_cast<const A*>(part_lse));
  });
}

}  // namespace trident::kernels::cpu
