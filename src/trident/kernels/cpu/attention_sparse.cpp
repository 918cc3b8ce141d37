// Block-sparse attention on the CPU (AttentionDims::layout; the contract is kernels/cpu/attention.h): the
// work follows the layout's blocks. A query block visits only the key blocks its layout row selects (and,
// causal, those on or before it); a key block, only the query blocks that select it.
//
// Forward: per (batch, head, query block), an online softmax over the selected key blocks, one block
// product at a time: S = (Q·scale)·Kᵀ [rows × keys] as rows of AXPYs over a transposed K (vectorised over
// the keys), then P·V as AXPYs over V's rows (vectorised over head_dim). Backward: Di = Σ dout·out per row
// first; then dq tasks per (batch, head, query block) over its selected key blocks, and dk/dv tasks per
// (batch, kv head, key block) over the group's heads and the query blocks selecting it, in order. Each
// recomputes P = exp(S − lse) and dS = P ∘ (dP − Di); with dropout, dP = keep ∘ dout·Vᵀ and dV = Zᵀ·dout
// with Z = P ∘ keep. No task writes what another writes; sums run in a fixed order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"
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

  Geometry g;
  AttentionLayout L;
  i64 bs, nqb, nkb;
};

// rows [n × D] of x (stride elements apart) as A, times factor, into dst [n × D].
template <typename T, typename A>
void pack(const T* x, i64 stride, i64 n, i64 D, A factor, A* dst) {
  for (i64 i = 0; i < n; ++i)
    for (i64 d = 0; d < D; ++d) dst[i * D + d] = static_cast<A>(load(x[i * stride + d])) * factor;
}

// The transpose [D × n] of rows [n × D] of x.
template <typename T, typename A>
void pack_t(const T* x, i64 stride, i64 n, i64 D, A* dst) {
  for (i64 i = 0; i < n; ++i)
    for (i64 d = 0; d < D; ++d) dst[d * n + i] = static_cast<A>(load(x[i * stride + d]));
}

// out [nr × nk] = a [nr × D] · bt [D × nk].
template <typename A>
void product(const A* a, const A* bt, i64 nr, i64 nk, i64 D, A* out) {
  for (i64 i = 0; i < nr; ++i) {
    A* o = out + i * nk;
    std::fill_n(o, nk, A(0));
    for (i64 d = 0; d < D; ++d) {
      const A x = a[i * D + d];
      const A* b = bt + d * nk;
#pragma omp simd
      for (i64 j = 0; j < nk; ++j) o[j] += x * b[j];
    }
  }
}

// Hides (−inf) the keys of the block from s0 that query t does not see: after it (causal), padding.
template <typename A>
void hide(const Sparse& sp, const HiddenKeys& keys, i64 b, i64 t, i64 s0, i64 nk, A* row) {
  if (sp.g.causal)
    for (i64 j = std::max<i64>(t - s0 + 1, 0); j < nk; ++j) row[j] = kNegInf<A>;
  if (const std::uint8_t* real = keys.row(b, s0))
    for (i64 j = 0; j < nk; ++j)
      if (real[j] == 0) row[j] = kNegInf<A>;
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
  const i64 bs = sp.bs, D = g.D;
  parallel_for(0, g.B * g.H * sp.nqb, 1, [&](i64 lo, i64 hi) {
    std::vector<A> qs(bs * D), kt(bs * D), vs(bs * D), s(bs * bs), acc(bs * D), m(bs), l(bs), keep(bs);
    for (i64 task = lo; task < hi; ++task) {
      const i64 r = task % sp.nqb, h = task / sp.nqb % g.H, b = task / (sp.nqb * g.H), hk = h / g.group;
      const i64 t0 = r * bs, nr = sp.rows_of(r);
      pack(q + g.q_offset(b, t0, h), g.q_stride(), nr, D, scale, qs.data());
      std::fill(acc.begin(), acc.end(), A(0));
      std::fill(m.begin(), m.end(), kNegInf<A>);
      std::fill(l.begin(), l.end(), A(0));
      for (i64 c = 0; c < sp.nkb; ++c) {
        if (!sp.selected(h, r, c)) continue;
        const i64 s0 = c * bs, nk = sp.keys_of(c);
        pack_t(k + g.kv_offset(b, s0, hk), g.kv_stride(), nk, D, kt.data());
        pack(v + g.kv_offset(b, s0, hk), g.kv_stride(), nk, D, A(1), vs.data());
        product(qs.data(), kt.data(), nr, nk, D, s.data());
        for (i64 i = 0; i < nr; ++i) {
          A* row = s.data() + i * nk;
          hide(sp, keys, b, t0 + i, s0, nk, row);
          A mx = m[static_cast<std::size_t>(i)];
          for (i64 j = 0; j < nk; ++j) mx = std::max(mx, row[j]);
          if (mx == kNegInf<A>) continue;  // nothing visible to this row yet
          const A alpha = exp_acc(m[static_cast<std::size_t>(i)] - mx);
          A sum = 0;
          for (i64 j = 0; j < nk; ++j) {
            row[j] = exp_acc(row[j] - mx);
            sum += row[j];
          }
          l[static_cast<std::size_t>(i)] = l[static_cast<std::size_t>(i)] * alpha + sum;
          m[static_cast<std::size_t>(i)] = mx;
          A* a = acc.data() + i * D;
          if (alpha != A(1))
            for (i64 d = 0; d < D; ++d) a[d] *= alpha;
          if (drop.active()) {
            drop.keep(b, h, t0 + i, s0, 0, nk, keep.data());
            for (i64 j = 0; j < nk; ++j) row[j] *= keep[static_cast<std::size_t>(j)];
          }
          for (i64 j = 0; j < nk; ++j) {
            const A p = row[j];
            if (p == A(0)) continue;
            const A* vr = vs.data() + j * D;
#pragma omp simd
            for (i64 d = 0; d < D; ++d) a[d] += p * vr[d];
          }
        }
      }
      A* lse_row = lse + (b * g.H + h) * g.T + t0;
      for (i64 i = 0; i < nr; ++i) {
        const A sum = l[static_cast<std::size_t>(i)];
        T* o = out + g.q_offset(b, t0 + i, h);
        for (i64 d = 0; d < D; ++d) o[d] = static_cast<T>(sum > A(0) ? acc[static_cast<std::size_t>(i * D + d)] / sum : A(0));
        lse_row[i] = sum > A(0) ? m[static_cast<std::size_t>(i)] + std::log(sum) : kNegInf<A>;
      }
    }
  });
}

// What both backward tasks compute for the block pair (query block from t0, nr rows; key block from s0, nk
// keys): P (Z = P ∘ keep with dropout) into p and dS into ds, [nr × nk], from the scaled queries, dout
// rows, the transposed K and V, lse and Di.
template <typename A>
void pair_grad(const Sparse& sp, const HiddenKeys& keys, const ProbsDropout& drop, i64 b, i64 h, i64 t0, i64 nr,
               i64 s0, i64 nk, const A* qs, const A* dos, const A* kt, const A* vt, const A* lse, const A* di, A* p,
               A* ds, A* keep) {
  const i64 D = sp.g.D;
  product(qs, kt, nr, nk, D, p);
  product(dos, vt, nr, nk, D, ds);
  for (i64 i = 0; i < nr; ++i) {
    A* prow = p + i * nk;
    A* drow = ds + i * nk;
    if (lse[i] == kNegInf<A>) {
      std::fill_n(prow, nk, A(0));
      std::fill_n(drow, nk, A(0));
      continue;
    }
    hide(sp, keys, b, t0 + i, s0, nk, prow);
    for (i64 j = 0; j < nk; ++j) prow[j] = exp_acc(prow[j] - lse[i]);
    if (drop.active()) {
      drop.keep(b, h, t0 + i, s0, 0, nk, keep);
      for (i64 j = 0; j < nk; ++j) {
        drow[j] = prow[j] * (drow[j] * keep[j] - di[i]);
        prow[j] *= keep[j];  // Z, for dV
      }
    } else {
      for (i64 j = 0; j < nk; ++j) drow[j] = prow[j] * (drow[j] - di[i]);
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
  const i64 bs = sp.bs, D = g.D;
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
    std::vector<A> qs(bs * D), dos(bs * D), kt(bs * D), vt(bs * D), krows(bs * D), p(bs * bs), ds(bs * bs),
        acc(bs * D), acc2(bs * D), keep(bs);
    for (i64 task = lo; task < hi; ++task) {
      if (task < n_q) {  // dq of (b, h, query block r)
        const i64 r = task % sp.nqb, h = task / sp.nqb % g.H, b = task / (sp.nqb * g.H), hk = h / g.group;
        const i64 t0 = r * bs, nr = sp.rows_of(r);
        pack(q + g.q_offset(b, t0, h), g.q_stride(), nr, D, scale, qs.data());
        pack(dout + g.q_offset(b, t0, h), g.q_stride(), nr, D, A(1), dos.data());
        const A* lse_r = lse + (b * g.H + h) * g.T + t0;
        const A* di_r = di.data() + (b * g.H + h) * g.T + t0;
        std::fill(acc.begin(), acc.end(), A(0));
        for (i64 c = 0; c < sp.nkb; ++c) {
          if (!sp.selected(h, r, c)) continue;
          const i64 s0 = c * bs, nk = sp.keys_of(c);
          pack_t(k + g.kv_offset(b, s0, hk), g.kv_stride(), nk, D, kt.data());
          pack_t(v + g.kv_offset(b, s0, hk), g.kv_stride(), nk, D, vt.data());
          pack(k + g.kv_offset(b, s0, hk), g.kv_stride(), nk, D, A(1), krows.data());
          pair_grad(sp, keys, drop, b, h, t0, nr, s0, nk, qs.data(), dos.data(), kt.data(), vt.data(), lse_r, di_r,
                    p.data(), ds.data(), keep.data());
          for (i64 i = 0; i < nr; ++i)
            for (i64 j = 0; j < nk; ++j) {
              const A x = ds[static_cast<std::size_t>(i * nk + j)];
              if (x == A(0)) continue;
              const A* kr = krows.data() + j * D;
              A* a = acc.data() + i * D;
#pragma omp simd
              for (i64 d = 0; d < D; ++d) a[d] += x * kr[d];
            }
        }
        for (i64 i = 0; i < nr; ++i) {
          T* o = dq + g.q_offset(b, t0 + i, h);
          for (i64 d = 0; d < D; ++d) o[d] = static_cast<T>(acc[static_cast<std::size_t>(i * D + d)] * scale);
        }
        continue;
      }
      // dk, dv of (b, kv head hk, key block c): over the group's heads and the query blocks selecting it.
      const i64 kv_task = task - n_q;
      const i64 c = kv_task % sp.nkb, hk = kv_task / sp.nkb % g.Hkv, b = kv_task / (sp.nkb * g.Hkv);
      const i64 s0 = c * bs, nk = sp.keys_of(c);
      pack_t(k + g.kv_offset(b, s0, hk), g.kv_stride(), nk, D, kt.data());
      pack_t(v + g.kv_offset(b, s0, hk), g.kv_stride(), nk, D, vt.data());
      std::fill(acc.begin(), acc.end(), A(0));   // dk
      std::fill(acc2.begin(), acc2.end(), A(0));  // dv
      for (i64 h = hk * g.group; h < (hk + 1) * g.group; ++h) {
        for (i64 r = 0; r < sp.nqb; ++r) {
          if (!sp.selected(h, r, c)) continue;
          const i64 t0 = r * bs, nr = sp.rows_of(r);
          pack(q + g.q_offset(b, t0, h), g.q_stride(), nr, D, scale, qs.data());
          pack(dout + g.q_offset(b, t0, h), g.q_stride(), nr, D, A(1), dos.data());
          pair_grad(sp, keys, drop, b, h, t0, nr, s0, nk, qs.data(), dos.data(), kt.data(), vt.data(),
                    lse + (b * g.H + h) * g.T + t0, di.data() + (b * g.H + h) * g.T + t0, p.data(), ds.data(),
                    keep.data());
          for (i64 i = 0; i < nr; ++i) {
            const A* qr = qs.data() + i * D;
            const A* dr = dos.data() + i * D;
            for (i64 j = 0; j < nk; ++j) {
              const A z = p[static_cast<std::size_t>(i * nk + j)], x = ds[static_cast<std::size_t>(i * nk + j)];
              A* kacc = acc.data() + j * D;
              A* vacc = acc2.data() + j * D;
#pragma omp simd
              for (i64 d = 0; d < D; ++d) {
                kacc[d] += x * qr[d];
                vacc[d] += z * dr[d];
              }
            }
          }
        }
      }
      for (i64 j = 0; j < nk; ++j) {
        T* ko = dk + g.kv_offset(b, s0 + j, hk);
        T* vo = dv + g.kv_offset(b, s0 + j, hk);
        for (i64 d = 0; d < D; ++d) {
          ko[d] = static_cast<T>(acc[static_cast<std::size_t>(j * D + d)]);
          vo[d] = static_cast<T>(acc2[static_cast<std::size_t>(j * D + d)]);
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
