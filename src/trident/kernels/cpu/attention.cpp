// Flash-style attention on the CPU (see attention.h for the contract).
//
// Every task copies its tiles into acc_t scratch (Q pre-multiplied by the
// scale, K/V transposed where a product needs them that way, rows and columns
// beyond the tensor zero-filled), then runs two register-blocked tile products:
//   tile_abt:    C[M×64]  = A[M×K] · Btᵀ   (Bt stored [K×64], 4 rows × 64 lanes of accumulators)
//   tile_ab_acc: C[M×Dp] += P[M×K] · B[K×Dp] (B stored [K×Dp], 4 rows × W lanes)
// Both have fixed-size inner loops the compiler keeps in vector registers.
// The online softmax keeps per row the running max m and sum l, rescaling the
// output accumulator by exp(m_old − m_new) when the max grows.
#include "trident/kernels/cpu/attention.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/kernels/cpu/softmax.h"

namespace trident::kernels::cpu {

namespace {

using i64 = std::int64_t;

constexpr i64 kBlockQ = 64;  // queries per tile
constexpr i64 kBlockK = 64;  // keys per tile
constexpr i64 kTile = 64;    // width of a score tile (= kBlockQ = kBlockK)
constexpr i64 kRows = 4;     // rows per micro-kernel step
static_assert(kBlockQ == kTile && kBlockK == kTile);

constexpr i64 round_up(i64 x, i64 m) { return (x + m - 1) / m * m; }
constexpr i64 ceil_div(i64 x, i64 m) { return (x + m - 1) / m; }

// A 64-byte-aligned scratch array owned by one task loop.
template <typename A>
class Scratch {
 public:
  explicit Scratch(i64 n) {
    const std::size_t bytes = static_cast<std::size_t>(round_up(std::max<i64>(n, 1) * static_cast<i64>(sizeof(A)), 64));
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

// c[m][n] = Σ_k a[m·lda + k] · bt[k·kTile + n] for m < M (a multiple of kRows), n < kTile.
template <typename A>
void tile_abt(const A* __restrict a, i64 lda, const A* __restrict bt, i64 K, A* __restrict c, i64 M) {
  for (i64 m = 0; m < M; m += kRows) {
    A acc[kRows][kTile] = {};
    const A* a0 = a + m * lda;
    for (i64 k = 0; k < K; ++k) {
      const A* b = bt + k * kTile;
      for (i64 r = 0; r < kRows; ++r) {
        const A av = a0[r * lda + k];
        for (i64 n = 0; n < kTile; ++n) acc[r][n] += av * b[n];
      }
    }
    for (i64 r = 0; r < kRows; ++r)
      for (i64 n = 0; n < kTile; ++n) c[(m + r) * kTile + n] = acc[r][n];
  }
}

// c[m][0:Dp] += Σ_{k<K} p[m·kTile + k] · b[k·Dp + 0:Dp] for m < M (a multiple of kRows); W divides Dp.
template <typename A, i64 W>
void tile_ab_acc_w(const A* __restrict p, const A* __restrict b, i64 K, A* __restrict c, i64 Dp, i64 M) {
  for (i64 m = 0; m < M; m += kRows) {
    for (i64 d0 = 0; d0 < Dp; d0 += W) {
      A acc[kRows][W];
      for (i64 r = 0; r < kRows; ++r)
        for (i64 n = 0; n < W; ++n) acc[r][n] = c[(m + r) * Dp + d0 + n];
      for (i64 k = 0; k < K; ++k) {
        const A* bk = b + k * Dp + d0;
        for (i64 r = 0; r < kRows; ++r) {
          const A pv = p[(m + r) * kTile + k];
          for (i64 n = 0; n < W; ++n) acc[r][n] += pv * bk[n];
        }
      }
      for (i64 r = 0; r < kRows; ++r)
        for (i64 n = 0; n < W; ++n) c[(m + r) * Dp + d0 + n] = acc[r][n];
    }
  }
}

template <typename A>
void tile_ab_acc(const A* p, const A* b, i64 K, A* c, i64 Dp, i64 M) {
  if (Dp % 64 == 0) {
    tile_ab_acc_w<A, 64>(p, b, K, c, Dp, M);
  } else if (Dp % 32 == 0) {
    tile_ab_acc_w<A, 32>(p, b, K, c, Dp, M);
  } else {
    tile_ab_acc_w<A, 16>(p, b, K, c, Dp, M);
  }
}

// Tile copies into acc_t scratch. Rows [n, rows) and columns [D, Dp) are zero.
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

// Transposed copy: dst[d·kTile + i] = src row i, element d, for d < D; columns [n, kTile) zero.
template <typename T, typename A>
void pack_cols(const T* src, i64 stride, i64 n, i64 D, A factor, A* dst) {
  for (i64 d = 0; d < D; ++d) {
    A* out = dst + d * kTile;
    for (i64 i = 0; i < n; ++i) out[i] = load(src[i * stride + d]) * factor;
    for (i64 i = n; i < kTile; ++i) out[i] = A(0);
  }
}

// Tasks per thread chunk so that a chunk has at least ~2^18 multiply-adds: tiny
// problems (decoding steps, unit tests) stay on one thread instead of paying
// for a parallel region on a busy machine.
i64 task_grain(i64 work_per_task) { return std::max<i64>(1, ceil_div(i64(1) << 18, std::max<i64>(work_per_task, 1))); }

template <typename A>
constexpr A kNegInf = -std::numeric_limits<A>::infinity();

// Shared geometry: element offsets into the [B, T, H, D] / [B, S, Hkv, D] tensors.
struct Geometry {
  explicit Geometry(const AttentionDims& d)
      : B(d.batch), T(d.q_len), S(d.kv_len), H(d.heads), Hkv(d.kv_heads), D(d.head_dim),
        group(d.heads / d.kv_heads), Dp(round_up(d.head_dim, 16)), shift(d.kv_len - d.q_len), causal(d.causal),
        q_blocks(ceil_div(d.q_len, kBlockQ)), k_blocks(ceil_div(d.kv_len, kBlockK)) {}
  i64 q_offset(i64 b, i64 t, i64 h) const { return ((b * T + t) * H + h) * D; }
  i64 kv_offset(i64 b, i64 s, i64 hk) const { return ((b * S + s) * Hkv + hk) * D; }
  i64 q_stride() const { return H * D; }
  i64 kv_stride() const { return Hkv * D; }
  // Keys [0, kv_end) are visible to some query of the block starting at t0 with nq rows.
  i64 kv_end(i64 t0, i64 nq) const { return causal ? std::clamp<i64>(t0 + nq + shift, 0, S) : S; }
  // Number of keys of the tile starting at s0 (nk keys) visible to query t.
  i64 visible(i64 t, i64 s0, i64 nk) const { return causal ? std::clamp<i64>(t + shift - s0 + 1, 0, nk) : nk; }

  i64 B, T, S, H, Hkv, D, group, Dp, shift;
  bool causal;
  i64 q_blocks, k_blocks;
};

template <typename T>
void forward_impl(const AttentionDims& dims, const T* q, const T* k, const T* v, const T* mask, T* out,
                  acc_t<T>* lse) {
  using A = acc_t<T>;
  const Geometry g(dims);
  const A scale = static_cast<A>(dims.scale);
  const i64 tasks = g.B * g.H * g.q_blocks;
  const i64 grain = task_grain(2 * std::min(kBlockQ, g.T) * g.S * g.Dp);
  parallel_for(0, tasks, grain, [&](i64 lo, i64 hi) {
    Scratch<A> qs(kBlockQ * g.Dp), kt(g.Dp * kTile), vp(kBlockK * g.Dp), sc(kBlockQ * kTile), acc(kBlockQ * g.Dp);
    A row_max[kBlockQ], row_sum[kBlockQ];
    for (i64 task = lo; task < hi; ++task) {
      const i64 qb = task % g.q_blocks, h = (task / g.q_blocks) % g.H, b = task / (g.q_blocks * g.H);
      const i64 hk = h / g.group;
      const i64 t0 = qb * kBlockQ, nq = std::min(kBlockQ, g.T - t0), M = round_up(nq, kRows);
      pack_rows(q + g.q_offset(b, t0, h), g.q_stride(), nq, M, g.D, g.Dp, scale, qs.get());
      std::fill_n(acc.get(), M * g.Dp, A(0));
      std::fill_n(row_max, kBlockQ, kNegInf<A>);
      std::fill_n(row_sum, kBlockQ, A(0));
      const i64 kv_end = g.kv_end(t0, nq);
      for (i64 s0 = 0; s0 < kv_end; s0 += kBlockK) {
        const i64 nk = std::min(kBlockK, g.S - s0);
        pack_cols(k + g.kv_offset(b, s0, hk), g.kv_stride(), nk, g.D, A(1), kt.get());
        pack_rows(v + g.kv_offset(b, s0, hk), g.kv_stride(), nk, nk, g.D, g.Dp, A(1), vp.get());
        tile_abt(qs.get(), g.Dp, kt.get(), g.D, sc.get(), M);
        for (i64 i = 0; i < M; ++i) {
          A* row = sc.get() + i * kTile;
          if (i >= nq) {
            std::fill_n(row, kTile, A(0));
            continue;
          }
          const i64 t = t0 + i;
          const i64 lim = g.visible(t, s0, nk);
          if (mask != nullptr) {
            const T* mrow = mask + t * g.S + s0;
            for (i64 j = 0; j < lim; ++j) row[j] += load(mrow[j]);
          }
          for (i64 j = lim; j < kTile; ++j) row[j] = kNegInf<A>;
          A mx = row_max[i];
#pragma omp simd reduction(max : mx)
          for (i64 j = 0; j < kTile; ++j) mx = std::max(mx, row[j]);
          if (mx == kNegInf<A>) {  // nothing visible to this query yet
            std::fill_n(row, kTile, A(0));
            continue;
          }
          const A alpha = exp_acc(row_max[i] - mx);
          A sum = 0;
#pragma omp simd reduction(+ : sum)
          for (i64 j = 0; j < kTile; ++j) {
            const A p = exp_acc(row[j] - mx);
            row[j] = p;
            sum += p;
          }
          row_sum[i] = row_sum[i] * alpha + sum;
          row_max[i] = mx;
          if (alpha != A(1)) {
            A* o = acc.get() + i * g.Dp;
            for (i64 d = 0; d < g.Dp; ++d) o[d] *= alpha;
          }
        }
        tile_ab_acc(sc.get(), vp.get(), nk, acc.get(), g.Dp, M);
      }
      A* lse_row = lse + (b * g.H + h) * g.T + t0;
      for (i64 i = 0; i < nq; ++i) {
        T* dst = out + g.q_offset(b, t0 + i, h);
        const A* o = acc.get() + i * g.Dp;
        if (row_sum[i] > A(0)) {
          const A inv = A(1) / row_sum[i];
          for (i64 d = 0; d < g.D; ++d) dst[d] = store_fast<T>(o[d] * inv);
          lse_row[i] = row_max[i] + std::log(row_sum[i]);
        } else {
          for (i64 d = 0; d < g.D; ++d) dst[d] = store_fast<T>(A(0));
          lse_row[i] = kNegInf<A>;
        }
      }
    }
  });
}

// Di = Σ_d dout · out per (b, h, t), laid out like lse.
template <typename T>
std::vector<acc_t<T>> output_dot(const Geometry& g, const T* out, const T* dout) {
  using A = acc_t<T>;
  std::vector<A> di(static_cast<std::size_t>(g.B * g.H * g.T));
  parallel_for(0, g.B * g.T, std::max<i64>(1, 4096 / std::max<i64>(g.H * g.D, 1)), [&](i64 lo, i64 hi) {
    for (i64 bt = lo; bt < hi; ++bt) {
      const i64 b = bt / g.T, t = bt % g.T;
      for (i64 h = 0; h < g.H; ++h) {
        const T* o = out + g.q_offset(b, t, h);
        const T* dout_row = dout + g.q_offset(b, t, h);
        A s = 0;
#pragma omp simd reduction(+ : s)
        for (i64 d = 0; d < g.D; ++d) s += load(o[d]) * load(dout_row[d]);
        di[static_cast<std::size_t>((b * g.H + h) * g.T + t)] = s;
      }
    }
  });
  return di;
}

// dk, dv: one task per (b, kv head, key block); sums over the group's query heads and all query blocks.
template <typename T>
void backward_kv(const Geometry& g, acc_t<T> scale, const T* q, const T* k, const T* v, const T* mask,
                 const acc_t<T>* lse, const acc_t<T>* di, const T* dout, T* dk, T* dv) {
  using A = acc_t<T>;
  const i64 tasks = g.B * g.Hkv * g.k_blocks;
  const i64 grain = task_grain(4 * std::min(kBlockK, g.S) * g.group * g.T * g.Dp);
  parallel_for(0, tasks, grain, [&](i64 lo, i64 hi) {
    Scratch<A> kp(kBlockK * g.Dp), vp(kBlockK * g.Dp), qst(g.Dp * kTile), dot(g.Dp * kTile), qs(kBlockQ * g.Dp),
        dop(kBlockQ * g.Dp), st(kBlockK * kTile), dpt(kBlockK * kTile), dka(kBlockK * g.Dp), dva(kBlockK * g.Dp);
    for (i64 task = lo; task < hi; ++task) {
      const i64 kb = task % g.k_blocks, hk = (task / g.k_blocks) % g.Hkv, b = task / (g.k_blocks * g.Hkv);
      const i64 s0 = kb * kBlockK, nk = std::min(kBlockK, g.S - s0), M = round_up(nk, kRows);
      pack_rows(k + g.kv_offset(b, s0, hk), g.kv_stride(), nk, M, g.D, g.Dp, A(1), kp.get());
      pack_rows(v + g.kv_offset(b, s0, hk), g.kv_stride(), nk, M, g.D, g.Dp, A(1), vp.get());
      std::fill_n(dka.get(), M * g.Dp, A(0));
      std::fill_n(dva.get(), M * g.Dp, A(0));
      // Queries t see key s when t ≥ s − shift; the first key of the tile bounds the first query block.
      const i64 t_first = g.causal ? std::max<i64>(0, s0 - g.shift) : 0;
      for (i64 h = hk * g.group; h < (hk + 1) * g.group; ++h) {
        const A* lse_h = lse + (b * g.H + h) * g.T;
        const A* di_h = di + (b * g.H + h) * g.T;
        for (i64 qb = t_first / kBlockQ; qb < g.q_blocks; ++qb) {
          const i64 t0 = qb * kBlockQ, nq = std::min(kBlockQ, g.T - t0);
          pack_cols(q + g.q_offset(b, t0, h), g.q_stride(), nq, g.D, scale, qst.get());
          pack_cols(dout + g.q_offset(b, t0, h), g.q_stride(), nq, g.D, A(1), dot.get());
          pack_rows(q + g.q_offset(b, t0, h), g.q_stride(), nq, nq, g.D, g.Dp, scale, qs.get());
          pack_rows(dout + g.q_offset(b, t0, h), g.q_stride(), nq, nq, g.D, g.Dp, A(1), dop.get());
          tile_abt(kp.get(), g.Dp, qst.get(), g.D, st.get(), M);   // St[j][i] = scores
          tile_abt(vp.get(), g.Dp, dot.get(), g.D, dpt.get(), M);  // dPt[j][i] = v_s · dout_t
          for (i64 j = 0; j < M; ++j) {
            A* p = st.get() + j * kTile;
            A* ds = dpt.get() + j * kTile;
            const i64 s = s0 + j;
            const i64 i_lo = j >= nk ? kTile : g.causal ? std::clamp<i64>(s - g.shift - t0, 0, kTile) : 0;
            const i64 i_hi = j >= nk ? kTile : nq;
            for (i64 i = 0; i < i_lo; ++i) p[i] = ds[i] = A(0);
            if (mask != nullptr) {
              for (i64 i = i_lo; i < i_hi; ++i) p[i] += load(mask[(t0 + i) * g.S + s]);
            }
            for (i64 i = i_lo; i < i_hi; ++i) {
              const A l = lse_h[t0 + i];
              const A pv = l == kNegInf<A> ? A(0) : exp_acc(p[i] - l);
              p[i] = pv;
              ds[i] = pv * (ds[i] - di_h[t0 + i]);
            }
            for (i64 i = std::max(i_lo, i_hi); i < kTile; ++i) p[i] = ds[i] = A(0);
          }
          tile_ab_acc(st.get(), dop.get(), nq, dva.get(), g.Dp, M);  // dV += Pᵀ · dO
          tile_ab_acc(dpt.get(), qs.get(), nq, dka.get(), g.Dp, M);  // dK += dSᵀ · Q·scale
        }
      }
      for (i64 j = 0; j < nk; ++j) {
        T* dkr = dk + g.kv_offset(b, s0 + j, hk);
        T* dvr = dv + g.kv_offset(b, s0 + j, hk);
        for (i64 d = 0; d < g.D; ++d) {
          dkr[d] = store_fast<T>(dka.get()[j * g.Dp + d]);
          dvr[d] = store_fast<T>(dva.get()[j * g.Dp + d]);
        }
      }
    }
  });
}

// dq: one task per (b, head, query block).
template <typename T>
void backward_q(const Geometry& g, acc_t<T> scale, const T* q, const T* k, const T* v, const T* mask,
                const acc_t<T>* lse, const acc_t<T>* di, const T* dout, T* dq) {
  using A = acc_t<T>;
  const i64 tasks = g.B * g.H * g.q_blocks;
  const i64 grain = task_grain(3 * std::min(kBlockQ, g.T) * g.S * g.Dp);
  parallel_for(0, tasks, grain, [&](i64 lo, i64 hi) {
    Scratch<A> qs(kBlockQ * g.Dp), dop(kBlockQ * g.Dp), kt(g.Dp * kTile), vt(g.Dp * kTile), kp(kBlockK * g.Dp),
        sc(kBlockQ * kTile), dp(kBlockQ * kTile), dqa(kBlockQ * g.Dp);
    for (i64 task = lo; task < hi; ++task) {
      const i64 qb = task % g.q_blocks, h = (task / g.q_blocks) % g.H, b = task / (g.q_blocks * g.H);
      const i64 hk = h / g.group;
      const i64 t0 = qb * kBlockQ, nq = std::min(kBlockQ, g.T - t0), M = round_up(nq, kRows);
      const A* lse_h = lse + (b * g.H + h) * g.T;
      const A* di_h = di + (b * g.H + h) * g.T;
      pack_rows(q + g.q_offset(b, t0, h), g.q_stride(), nq, M, g.D, g.Dp, scale, qs.get());
      pack_rows(dout + g.q_offset(b, t0, h), g.q_stride(), nq, M, g.D, g.Dp, A(1), dop.get());
      std::fill_n(dqa.get(), M * g.Dp, A(0));
      const i64 kv_end = g.kv_end(t0, nq);
      for (i64 s0 = 0; s0 < kv_end; s0 += kBlockK) {
        const i64 nk = std::min(kBlockK, g.S - s0);
        pack_cols(k + g.kv_offset(b, s0, hk), g.kv_stride(), nk, g.D, A(1), kt.get());
        pack_cols(v + g.kv_offset(b, s0, hk), g.kv_stride(), nk, g.D, A(1), vt.get());
        pack_rows(k + g.kv_offset(b, s0, hk), g.kv_stride(), nk, nk, g.D, g.Dp, A(1), kp.get());
        tile_abt(qs.get(), g.Dp, kt.get(), g.D, sc.get(), M);   // scores
        tile_abt(dop.get(), g.Dp, vt.get(), g.D, dp.get(), M);  // dP = dout · vᵀ
        for (i64 i = 0; i < M; ++i) {
          A* s = sc.get() + i * kTile;
          A* ds = dp.get() + i * kTile;
          const i64 t = t0 + i;
          const bool live = i < nq && lse_h[t] != kNegInf<A>;
          const i64 lim = live ? g.visible(t, s0, nk) : 0;
          if (mask != nullptr && lim > 0) {
            const T* mrow = mask + t * g.S + s0;
            for (i64 j = 0; j < lim; ++j) s[j] += load(mrow[j]);
          }
          if (lim > 0) {
            const A l = lse_h[t], dd = di_h[t];
            for (i64 j = 0; j < lim; ++j) ds[j] = exp_acc(s[j] - l) * (ds[j] - dd);
          }
          for (i64 j = lim; j < kTile; ++j) ds[j] = A(0);
        }
        tile_ab_acc(dp.get(), kp.get(), nk, dqa.get(), g.Dp, M);  // dQ += dS · K
      }
      for (i64 i = 0; i < nq; ++i) {
        T* dst = dq + g.q_offset(b, t0 + i, h);
        const A* src = dqa.get() + i * g.Dp;
        for (i64 d = 0; d < g.D; ++d) dst[d] = store_fast<T>(src[d] * scale);
      }
    }
  });
}

}  // namespace

void attention_forward(DType dtype, const AttentionDims& dims, const void* q, const void* k, const void* v,
                       const void* mask, void* out, void* lse) {
  TRIDENT_DISPATCH_FLOAT(dtype, "attention", [&] {
    forward_impl(dims, static_cast<const scalar_t*>(q), static_cast<const scalar_t*>(k),
                 static_cast<const scalar_t*>(v), static_cast<const scalar_t*>(mask), static_cast<scalar_t*>(out),
                 static_cast<acc_t<scalar_t>*>(lse));
  });
}

void attention_backward(DType dtype, const AttentionDims& dims, const void* q, const void* k, const void* v,
                        const void* mask, const void* out, const void* lse, const void* dout, void* dq, void* dk,
                        void* dv) {
  TRIDENT_DISPATCH_FLOAT(dtype, "attention_backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const Geometry g(dims);
    const A scale = static_cast<A>(dims.scale);
    const auto* qp = static_cast<const T*>(q);
    const auto* kp = static_cast<const T*>(k);
    const auto* vp = static_cast<const T*>(v);
    const auto* mp = static_cast<const T*>(mask);
    const auto* lp = static_cast<const A*>(lse);
    const auto* dop = static_cast<const T*>(dout);
    const std::vector<A> di = output_dot(g, static_cast<const T*>(out), dop);
    backward_kv(g, scale, qp, kp, vp, mp, lp, di.data(), dop, static_cast<T*>(dk), static_cast<T*>(dv));
    backward_q(g, scale, qp, kp, vp, mp, lp, di.data(), dop, static_cast<T*>(dq));
  });
}

}  // namespace trident::kernels::cpu
