// Block-sparse attention on the CPU (AttentionDims::layout; the contract is kernels/cpu/attention.h): the
// work follows the layout's blocks. A query block gathers the key blocks its layout row selects (and,
// causal, those on or before it) into one packed key set; a key block gathers the query rows that select it.
//
// Forward, per (batch, head, query block): S = (Q·scale)·Kᵀ over the gathered keys in one tile product,
// the masks (causal, padding), the softmax of each whole row (every key a row sees is in the set), then
// P·V, both products on the attention's register-blocked tiles (attention_gemm.h). Backward: Di = Σ
// dout·out per row first; dq tasks per (batch, head, query block) recompute P = exp(S − lse) over the
// same gathered keys, dS = P ∘ (dP − Di) and dq = dS·K; dk/dv tasks per (batch, kv head, key block)
// gather every query row (of the group's heads) that sees the block and form dK = dSᵀ·Q, dV = Zᵀ·dout
// (Z = P ∘ keep with dropout; dP = keep ∘ dout·Vᵀ). No task writes what another writes, and every sum
// runs in a fixed order, so the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/kernels/cpu/attention_gemm.h"
#include "trident/kernels/cpu/attention_tiles.h"
#include "trident/kernels/cpu/exp.h"

namespace trident::kernels::cpu {

namespace {

using namespace attention_detail;

struct Sparse {
  explicit Sparse(const AttentionDims& d)
      : g(d), L(d.layout), bs(d.layout.block), nqb(ceil_div(d.q_len, d.layout.block)),
        nkb(ceil_div(d.kv_len, d.layout.block)) {}
  // Whether query block r of head h attends to key block c (the layout, and under causal c ≤ r).
  bool selected(i64 h, i64 r, i64 c) const {
    if (g.causal && c > r) return false;
    const i64 hl = L.heads == 1 ? 0 : L.head_offset + h;
    return L.blocks[(hl * L.rows + r) * L.cols + c] != 0;
  }
  i64 rows_of(i64 r) const { return std::min(bs, g.T - r * bs); }
  i64 keys_of(i64 c) const { return std::min(bs, g.S - c * bs); }
  // The key positions of the blocks query block r of head h selects, in order.
  void gather_keys(i64 h, i64 r, std::vector<i64>& keys) const {
    keys.clear();
    for (i64 c = 0; c < nkb; ++c)
      if (selected(h, r, c))
        for (i64 s = c * bs; s < c * bs + keys_of(c); ++s) keys.push_back(s);
  }

  Geometry g;
  AttentionLayout L;
  i64 bs, nqb, nkb;
};

// Rows src[idx[i]] (i < n; stride elements apart) times factor into dst [rows × Dp], zero elsewhere.
template <typename T, typename A>
void pack_gathered(const T* src, i64 stride, const i64* idx, i64 n, i64 rows, i64 D, i64 Dp, A factor, A* dst) {
  std::fill_n(dst, rows * Dp, A(0));
  for (i64 i = 0; i < n; ++i) {
    const T* x = src + idx[i] * stride;
    for (i64 d = 0; d < D; ++d) dst[i * Dp + d] = static_cast<A>(load(x[d])) * factor;
  }
}

// The transpose [Dp × cols] of rows src[idx[j]] (j < n), zero elsewhere.
template <typename T, typename A>
void pack_gathered_t(const T* src, i64 stride, const i64* idx, i64 n, i64 cols, i64 D, i64 Dp, A* dst) {
  std::fill_n(dst, Dp * cols, A(0));
  for (i64 j = 0; j < n; ++j) {
    const T* x = src + idx[j] * stride;
    for (i64 d = 0; d < D; ++d) dst[d * cols + j] = static_cast<A>(load(x[d]));
  }
}

// K of sample b, kv head hk, transposed ([Dp × S], rows past D zero): packed once per (b, hk) a thread meets,
// so that gathering a query block's keys copies runs of columns.
template <typename A>
class KeysT {
 public:
  template <typename T>
  const A* get(const Geometry& g, const T* k, i64 b, i64 hk) {
    if (b == b_ && hk == hk_) return data_.data();
    data_.assign(static_cast<std::size_t>(g.Dp * g.S), A(0));
    for (i64 s = 0; s < g.S; ++s) {
      const T* x = k + g.kv_offset(b, s, hk);
      for (i64 d = 0; d < g.D; ++d) data_[static_cast<std::size_t>(d * g.S + s)] = static_cast<A>(load(x[d]));
    }
    b_ = b;
    hk_ = hk;
    return data_.data();
  }

 private:
  std::vector<A> data_;
  i64 b_ = -1, hk_ = -1;
};

// Columns key[j] (j < n, runs of consecutive positions) of a transposed [Dp × S] into dst [Dp × N], zero past n.
template <typename A>
void gather_columns(const A* full, i64 S, const i64* key, i64 n, i64 N, i64 Dp, A* dst) {
  for (i64 d = 0; d < Dp; ++d) {
    const A* src = full + d * S;
    A* out = dst + d * N;
    for (i64 j = 0; j < n;) {
      i64 e = j + 1;
      while (e < n && key[e] == key[e - 1] + 1) ++e;
      std::copy(src + key[j], src + key[j] + (e - j), out + j);
      j = e;
    }
    std::fill(out + n, out + N, A(0));
  }
}

// Hides (−inf) the gathered keys (positions key[j], ascending) that query t of sample b does not see:
// those after it (causal) and padding; and the packing columns [n, N).
template <typename A>
void hide(const Sparse& sp, const HiddenKeys& keys, i64 b, i64 t, const i64* key, i64 n, i64 N, A* row) {
  const i64 lim = sp.g.causal ? static_cast<i64>(std::upper_bound(key, key + n, t) - key) : n;
  std::fill(row + lim, row + N, kNegInf<A>);
  if (keys.row(b, 0) == nullptr) return;
  for (i64 j = 0; j < lim; ++j)
    if (*keys.row(b, key[j]) == 0) row[j] = kNegInf<A>;
}

// The dropout factors of query t against the gathered keys (runs of consecutive positions), into keep.
template <typename A>
void gathered_keep(const ProbsDropout& drop, i64 b, i64 h, i64 t, const i64* key, i64 n, A* keep) {
  for (i64 j = 0; j < n;) {
    i64 e = j + 1;
    while (e < n && key[e] == key[e - 1] + 1) ++e;
    drop.keep(b, h, t, key[j], 0, e - j, keep + j);
    j = e;
  }
}

template <typename T>
void forward(const AttentionDims& dims, const T* q, const T* k, const T* v, const void* key_mask, T* out,
             acc_t<T>* lse) {
  using A = acc_t<T>;
  const Sparse sp(dims);
  const Geometry& g = sp.g;
  const HiddenKeys keys(g, key_mask, dims.key_mask_dtype);
  const ProbsDropout drop(dims);
  const A scale = static_cast<A>(dims.scale);
  const i64 D = g.D, Dp = g.Dp, M = round_up(sp.bs, kRows);
  parallel_for(0, g.B * g.H * sp.nqb, 1, [&](i64 lo, i64 hi) {
    std::vector<i64> cols, rows(static_cast<std::size_t>(sp.bs));
    std::vector<A> qs(M * Dp), kt, vr, s, acc(M * Dp), keep;
    KeysT<A> keys_t;
    for (i64 task = lo; task < hi; ++task) {
      const i64 r = task % sp.nqb, h = task / sp.nqb % g.H, b = task / (sp.nqb * g.H), hk = h / g.group;
      const i64 t0 = r * sp.bs, nr = sp.rows_of(r);
      sp.gather_keys(h, r, cols);
      // Columns in multiples of 64: the products' register-blocked strips.
      const i64 n = static_cast<i64>(cols.size()), N = round_up(std::max<i64>(n, 1), kTile);
      for (i64 i = 0; i < nr; ++i) rows[static_cast<std::size_t>(i)] = b * g.T + t0 + i;
      std::vector<i64> key_rows(cols.size());
      for (std::size_t j = 0; j < cols.size(); ++j) key_rows[j] = b * g.S + cols[j];
      // Row indices in units of a row of q ([B·T] rows of H·D) and of k, v ([B·S] rows of Hkv·D).
      pack_gathered(q + h * D, g.q_stride(), rows.data(), nr, M, D, Dp, scale, qs.data());
      kt.resize(static_cast<std::size_t>(Dp * N));
      vr.resize(static_cast<std::size_t>(N * Dp));
      s.resize(static_cast<std::size_t>(M * N));
      keep.resize(static_cast<std::size_t>(N));
      gather_columns(keys_t.get(g, k, b, hk), g.S, cols.data(), n, N, Dp, kt.data());
      pack_gathered(v + hk * D, g.kv_stride(), key_rows.data(), n, N, D, Dp, A(1), vr.data());
      gemm_tile<A, false>(M, N, D, qs.data(), Dp, 1, kt.data(), N, s.data(), N);
      A* lse_row = lse + (b * g.H + h) * g.T + t0;
      for (i64 i = 0; i < M; ++i) {
        A* row = s.data() + i * N;
        A mx = kNegInf<A>;
        if (i < nr) {
          hide(sp, keys, b, t0 + i, cols.data(), n, N, row);
#pragma omp simd reduction(max : mx)
          for (i64 j = 0; j < N; ++j) mx = std::max(mx, row[j]);
        }
        if (mx == kNegInf<A>) {  // a padding row, or a query that sees no key
          std::fill_n(row, N, A(0));
          if (i < nr) lse_row[i] = kNegInf<A>;
          continue;
        }
        A sum = 0;
#pragma omp simd reduction(+ : sum)
        for (i64 j = 0; j < N; ++j) {
          row[j] = exp_acc(row[j] - mx);
          sum += row[j];
        }
        lse_row[i] = mx + std::log(sum);
        const A inv = A(1) / sum;
        if (drop.active()) gathered_keep(drop, b, h, t0 + i, cols.data(), n, keep.data());
        for (i64 j = 0; j < N; ++j) row[j] *= drop.active() && j < n ? inv * keep[static_cast<std::size_t>(j)] : inv;
      }
      gemm_tile<A, false>(M, Dp, N, s.data(), N, 1, vr.data(), Dp, acc.data(), Dp);
      for (i64 i = 0; i < nr; ++i) {
        T* o = out + g.q_offset(b, t0 + i, h);
        for (i64 d = 0; d < D; ++d) o[d] = static_cast<T>(acc[static_cast<std::size_t>(i * Dp + d)]);
      }
    }
  });
}

// P (Z = P ∘ keep under dropout, into p) and dS (into ds), [M × N], of gathered query rows against gathered
// keys, from S = p (already Q·scale·Kᵀ) and dZ = ds (already dout·Vᵀ): row i is query t[i] of head hh[i]
// (−1: a padding row, all 0), with its lse and Di; column j is key col[j] (j < n; the rest padding).
template <typename A>
void softmax_grad(const Sparse& sp, const HiddenKeys& keys, const ProbsDropout& drop, i64 b, const i64* t,
                  const i64* hh, const A* lse, const A* di, i64 M, const i64* col, i64 n, i64 N, A* p, A* ds,
                  A* keep) {
  for (i64 i = 0; i < M; ++i) {
    A* prow = p + i * N;
    A* drow = ds + i * N;
    if (hh[i] < 0 || lse[i] == kNegInf<A>) {
      std::fill_n(prow, N, A(0));
      std::fill_n(drow, N, A(0));
      continue;
    }
    hide(sp, keys, b, t[i], col, n, N, prow);
    const A l = lse[i], d = di[i];
    if (drop.active()) {
      gathered_keep(drop, b, hh[i], t[i], col, n, keep);
      std::fill(keep + n, keep + N, A(0));
#pragma omp simd
      for (i64 j = 0; j < N; ++j) {
        const A pv = exp_acc(prow[j] - l);
        drow[j] = pv * (drow[j] * keep[j] - d);
        prow[j] = pv * keep[j];
      }
    } else {
#pragma omp simd
      for (i64 j = 0; j < N; ++j) {
        const A pv = exp_acc(prow[j] - l);
        drow[j] = pv * (drow[j] - d);
        prow[j] = pv;
      }
    }
  }
}

template <typename T>
void backward(const AttentionDims& dims, const T* q, const T* k, const T* v, const void* key_mask, const T* out,
              const acc_t<T>* lse, const T* dout, T* dq, T* dk, T* dv) {
  using A = acc_t<T>;
  const Sparse sp(dims);
  const Geometry& g = sp.g;
  const HiddenKeys keys(g, key_mask, dims.key_mask_dtype);
  const ProbsDropout drop(dims);
  const A scale = static_cast<A>(dims.scale);
  const i64 D = g.D, Dp = g.Dp;
  // Di = Σ_d dout·out per (b, h, t).
  std::vector<A> di(static_cast<std::size_t>(g.B * g.H * g.T));
  parallel_for(0, g.B * g.H, 1, [&](i64 lo, i64 hi) {
    for (i64 bh = lo; bh < hi; ++bh) {
      const i64 b = bh / g.H, h = bh % g.H;
      for (i64 t = 0; t < g.T; ++t) {
        const T* o = out + g.q_offset(b, t, h);
        const T* d_o = dout + g.q_offset(b, t, h);
        A s = 0;
        for (i64 d = 0; d < D; ++d) s += static_cast<A>(load(o[d])) * static_cast<A>(load(d_o[d]));
        di[static_cast<std::size_t>(bh * g.T + t)] = s;
      }
    }
  });
  const i64 n_q = g.B * g.H * sp.nqb, n_kv = g.B * g.Hkv * sp.nkb;
  parallel_for(0, n_q + n_kv, 1, [&](i64 lo, i64 hi) {
    std::vector<i64> cols, key_rows, q_rows, ts, hs;
    std::vector<A> qs, dos, kt, vt, kg, p, ds, acc, acc2, keep, lse_g, di_g;
    KeysT<A> keys_t, values_t;
    for (i64 task = lo; task < hi; ++task) {
      if (task < n_q) {  // dq of (b, h, query block r)
        const i64 r = task % sp.nqb, h = task / sp.nqb % g.H, b = task / (sp.nqb * g.H), hk = h / g.group;
        const i64 t0 = r * sp.bs, nr = sp.rows_of(r), M = round_up(nr, kRows);
        sp.gather_keys(h, r, cols);
        const i64 n = static_cast<i64>(cols.size()), N = round_up(std::max<i64>(n, 1), kTile);
        q_rows.assign(static_cast<std::size_t>(M), 0);
        ts.assign(static_cast<std::size_t>(M), 0);
        hs.assign(static_cast<std::size_t>(M), -1);
        lse_g.assign(static_cast<std::size_t>(M), kNegInf<A>);
        di_g.assign(static_cast<std::size_t>(M), A(0));
        for (i64 i = 0; i < nr; ++i) {
          q_rows[static_cast<std::size_t>(i)] = b * g.T + t0 + i;
          ts[static_cast<std::size_t>(i)] = t0 + i;
          hs[static_cast<std::size_t>(i)] = h;
          lse_g[static_cast<std::size_t>(i)] = lse[(b * g.H + h) * g.T + t0 + i];
          di_g[static_cast<std::size_t>(i)] = di[static_cast<std::size_t>((b * g.H + h) * g.T + t0 + i)];
        }
        key_rows.resize(cols.size());
        for (std::size_t j = 0; j < cols.size(); ++j) key_rows[j] = b * g.S + cols[j];
        qs.resize(static_cast<std::size_t>(M * Dp));
        dos.resize(qs.size());
        kt.resize(static_cast<std::size_t>(Dp * N));
        vt.resize(kt.size());
        kg.resize(static_cast<std::size_t>(N * Dp));
        p.resize(static_cast<std::size_t>(M * N));
        ds.resize(p.size());
        acc.resize(static_cast<std::size_t>(M * Dp));
        keep.resize(static_cast<std::size_t>(N));
        pack_gathered(q + h * D, g.q_stride(), q_rows.data(), nr, M, D, Dp, scale, qs.data());
        pack_gathered(dout + h * D, g.q_stride(), q_rows.data(), nr, M, D, Dp, A(1), dos.data());
        gather_columns(keys_t.get(g, k, b, hk), g.S, cols.data(), n, N, Dp, kt.data());
        gather_columns(values_t.get(g, v, b, hk), g.S, cols.data(), n, N, Dp, vt.data());
        pack_gathered(k + hk * D, g.kv_stride(), key_rows.data(), n, N, D, Dp, A(1), kg.data());
        gemm_tile<A, false>(M, N, D, qs.data(), Dp, 1, kt.data(), N, p.data(), N);
        gemm_tile<A, false>(M, N, D, dos.data(), Dp, 1, vt.data(), N, ds.data(), N);
        softmax_grad(sp, keys, drop, b, ts.data(), hs.data(), lse_g.data(), di_g.data(), M, cols.data(), n, N,
                     p.data(), ds.data(), keep.data());
        gemm_tile<A, false>(M, Dp, N, ds.data(), N, 1, kg.data(), Dp, acc.data(), Dp);
        for (i64 i = 0; i < nr; ++i) {
          T* o = dq + g.q_offset(b, t0 + i, h);
          for (i64 d = 0; d < D; ++d) o[d] = static_cast<T>(acc[static_cast<std::size_t>(i * Dp + d)] * scale);
        }
        continue;
      }
      // dk, dv of (b, kv head hk, key block c): every query row of the group's heads that selects it.
      const i64 kv_task = task - n_q;
      const i64 c = kv_task % sp.nkb, hk = kv_task / sp.nkb % g.Hkv, b = kv_task / (sp.nkb * g.Hkv);
      const i64 s0 = c * sp.bs, nk = sp.keys_of(c), N = round_up(nk, 16);
      ts.clear();
      hs.clear();
      for (i64 h = hk * g.group; h < (hk + 1) * g.group; ++h)
        for (i64 r = 0; r < sp.nqb; ++r)
          if (sp.selected(h, r, c))
            for (i64 t = r * sp.bs; t < r * sp.bs + sp.rows_of(r); ++t) {
              ts.push_back(t);
              hs.push_back(h);
            }
      const i64 m = static_cast<i64>(ts.size()), M = round_up(std::max<i64>(m, 1), 16);
      ts.resize(static_cast<std::size_t>(M), 0);
      hs.resize(static_cast<std::size_t>(M), -1);
      lse_g.assign(static_cast<std::size_t>(M), kNegInf<A>);
      di_g.assign(static_cast<std::size_t>(M), A(0));
      qs.assign(static_cast<std::size_t>(M * Dp), A(0));
      dos.assign(qs.size(), A(0));
      for (i64 i = 0; i < m; ++i) {
        const auto at = static_cast<std::size_t>(i);
        const i64 t = ts[at], h = hs[at];
        lse_g[at] = lse[(b * g.H + h) * g.T + t];
        di_g[at] = di[static_cast<std::size_t>((b * g.H + h) * g.T + t)];
        const T* qr = q + g.q_offset(b, t, h);
        const T* dr = dout + g.q_offset(b, t, h);
        for (i64 d = 0; d < D; ++d) {
          qs[static_cast<std::size_t>(i * Dp + d)] = static_cast<A>(load(qr[d])) * scale;
          dos[static_cast<std::size_t>(i * Dp + d)] = static_cast<A>(load(dr[d]));
        }
      }
      cols.resize(static_cast<std::size_t>(nk));
      key_rows.resize(static_cast<std::size_t>(nk));
      for (i64 j = 0; j < nk; ++j) {
        cols[static_cast<std::size_t>(j)] = s0 + j;
        key_rows[static_cast<std::size_t>(j)] = b * g.S + s0 + j;
      }
      kt.resize(static_cast<std::size_t>(Dp * N));
      vt.resize(kt.size());
      p.resize(static_cast<std::size_t>(M * N));
      ds.resize(p.size());
      acc.resize(static_cast<std::size_t>(N * Dp));
      acc2.resize(acc.size());
      keep.resize(static_cast<std::size_t>(N));
      pack_gathered_t(k + hk * D, g.kv_stride(), key_rows.data(), nk, N, D, Dp, kt.data());
      pack_gathered_t(v + hk * D, g.kv_stride(), key_rows.data(), nk, N, D, Dp, vt.data());
      gemm_tile<A, false>(M, N, D, qs.data(), Dp, 1, kt.data(), N, p.data(), N);
      gemm_tile<A, false>(M, N, D, dos.data(), Dp, 1, vt.data(), N, ds.data(), N);
      softmax_grad(sp, keys, drop, b, ts.data(), hs.data(), lse_g.data(), di_g.data(), M, cols.data(), nk, N, p.data(),
                   ds.data(), keep.data());
      // dK = dSᵀ·(Q·scale) and dV = Zᵀ·dout: [N × Dp], reading dS and Z transposed.
      gemm_tile<A, false>(N, Dp, M, ds.data(), 1, N, qs.data(), Dp, acc.data(), Dp);
      gemm_tile<A, false>(N, Dp, M, p.data(), 1, N, dos.data(), Dp, acc2.data(), Dp);
      for (i64 j = 0; j < nk; ++j) {
        T* ko = dk + g.kv_offset(b, s0 + j, hk);
        T* vo = dv + g.kv_offset(b, s0 + j, hk);
        for (i64 d = 0; d < D; ++d) {
          ko[d] = static_cast<T>(acc[static_cast<std::size_t>(j * Dp + d)]);
          vo[d] = static_cast<T>(acc2[static_cast<std::size_t>(j * Dp + d)]);
        }
      }
    }
  });
}

}  // namespace

void block_sparse_attention_forward(DType dtype, const AttentionDims& dims, const void* q, const void* k,
                                    const void* v, const void* key_mask, void* out, void* lse) {
  TRIDENT_DISPATCH_FLOAT(dtype, "attention (block-sparse)", [&] {
    forward(dims, static_cast<const scalar_t*>(q), static_cast<const scalar_t*>(k), static_cast<const scalar_t*>(v),
            key_mask, static_cast<scalar_t*>(out), static_cast<acc_t<scalar_t>*>(lse));
  });
}

void block_sparse_attention_backward(DType dtype, const AttentionDims& dims, const void* q, const void* k,
                                     const void* v, const void* key_mask, const void* out, const void* lse,
                                     const void* dout, void* dq, void* dk, void* dv) {
  TRIDENT_DISPATCH_FLOAT(dtype, "attention_backward (block-sparse)", [&] {
    using T = scalar_t;
    backward(dims, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), key_mask,
             static_cast<const T*>(out), static_cast<const acc_t<T>*>(lse), static_cast<const T*>(dout),
             static_cast<T*>(dq), static_cast<T*>(dk), static_cast<T*>(dv));
  });
}

}  // namespace trident::kernels::cpu
