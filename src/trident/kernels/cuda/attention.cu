// Flash attention on the GPU (contract: kernels/cpu/attention.h; launch shapes: attention.h): the FMA
// kernels for f32 and f64, the Di kernel and the launchers; the tensor-core kernels for bf16 and f16 are
// in attention_mma.cu.
//
// f32 and f64 run plain FMAs (no TF32, so f32 follows the CPU to 1e-5) over the same tiling as the
// tensor-core path: 256 threads as a 16×16 grid, thread (r, c) owning rows r + 16i and columns c + 16j of
// every tile product; Q is pre-multiplied by the scale as on the CPU.
//
// Forward: online softmax per query row in f32 (f64) — running max m and sum l, the output rescaled by
// exp(m_old − m_new); key tiles outside the tile's visible range (causal, sliding window) are never
// loaded, partial ones are masked per element, and so are padding keys (key_mask); a row with no visible
// key gets out = 0 and lse = −inf. With dropout on the probabilities, P·V takes Z = P ∘ keep, keep drawn
// per element by the counter-based generator at its global index (Geometry::keep, the CPU's mask to the
// bit) and regenerated in the backward, never stored. Backward: Di = Σ_d dout·out per row (its own
// kernel), then P = exp(S − lse) recomputed, dS = P ∘ (dP − Di) with dP = keep ∘ dZ, dV = Zᵀ·dO; one kernel per (batch, kv head, key tile) owns dK and
// dV and sums over the group's heads and the query tiles in order, one per (batch, head, query tile) owns
// dQ and sums over key tiles in order. Nothing is written by two blocks and no float atomics are used, so
// results are bit-identical from run to run.
#include "trident/kernels/cuda/attention_common.cuh"

namespace trident::kernels::cuda {

namespace {

using namespace attention_detail;

// ======================================================================================================
// FMA path (f32, f64)
// ======================================================================================================

constexpr int kFmaThreads = 256;  // a 16 × 16 grid: thread (tid / 16, tid % 16)

// Tile rows per element type: f64 halves them so that shared memory stays near 70 KB at Dp = 128.
template <typename A>
struct FmaTiles {
  static constexpr int forward_q = 64, forward_k = 32, backward = 32;
};
template <>
struct FmaTiles<double> {
  static constexpr int forward_q = 32, forward_k = 16, backward = 16;
};

// dst[r·ld + d] = src[r·stride + d]·factor for r < n, d < D; zero for the other r < R, d < Dp.
template <int R, int Dp, typename A>
__device__ __forceinline__ void load_rows(const A* __restrict__ src, i64 stride, int n, int D, A* dst, int ld,
                                          A factor) {
  for (int idx = threadIdx.x; idx < R * Dp; idx += blockDim.x) {
    const int r = idx / Dp, d = idx % Dp;
    dst[r * ld + d] = r < n && d < D ? src[r * stride + d] * factor : A(0);
  }
}

// The tile products of the FMA kernels. Thread (tr, tc) owns rows r = tr + 16i of x and columns
// n = tc + 16j of y: acc[i][j] += Σ_c x[r·XR + c] · y[n·YC + c·YK] over c < C, with x and y in shared
// memory (YC = LD, YK = 1: y's rows are n, as K in Q·Kᵀ; YC = 1, YK = LD: y's rows are c, as V in P·V).
template <int I, int J, int C, int XR, int YC, int YK, typename A>
__device__ __forceinline__ void tile_product(const A* x, const A* y, int tr, int tc, A (&acc)[I][J]) {
  for (int c = 0; c < C; ++c) {
    A xv[I], yv[J];
#pragma unroll
    for (int i = 0; i < I; ++i) xv[i] = x[(tr + 16 * i) * XR + c];
#pragma unroll
    for (int j = 0; j < J; ++j) yv[j] = y[(tc + 16 * j) * YC + c * YK];
#pragma unroll
    for (int i = 0; i < I; ++i)
#pragma unroll
      for (int j = 0; j < J; ++j) acc[i][j] += xv[i] * yv[j];
  }
}

// Two products of the same shape in one pass (the backward kernels'): acc1 += x1·y1 and acc2 += x2·y2.
template <int I, int J, int C, int XR, int YC, int YK, typename A>
__device__ __forceinline__ void tile_products2(const A* x1, const A* x2, const A* y1, const A* y2, int tr, int tc,
                                               A (&acc1)[I][J], A (&acc2)[I][J]) {
  for (int c = 0; c < C; ++c) {
    A xv1[I], xv2[I], yv1[J], yv2[J];
#pragma unroll
    for (int i = 0; i < I; ++i) {
      xv1[i] = x1[(tr + 16 * i) * XR + c];
      xv2[i] = x2[(tr + 16 * i) * XR + c];
    }
#pragma unroll
    for (int j = 0; j < J; ++j) {
      yv1[j] = y1[(tc + 16 * j) * YC + c * YK];
      yv2[j] = y2[(tc + 16 * j) * YC + c * YK];
    }
#pragma unroll
    for (int i = 0; i < I; ++i) {
#pragma unroll
      for (int j = 0; j < J; ++j) {
        acc1[i][j] += xv1[i] * yv1[j];
        acc2[i][j] += xv2[i] * yv2[j];
      }
    }
  }
}

// K and V rows [s0, s0 + nk) of kv head hk into ks and vs ([BK][Dp+1], zero past the nk real rows).
template <int BK, int Dp, typename A>
__device__ __forceinline__ void load_kv_rows(const Geometry& g, const A* __restrict__ k, const A* __restrict__ v, i64 b,
                                             i64 hk, i64 s0, int nk, A* ks, A* vs) {
  load_rows<BK, Dp>(k + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, static_cast<int>(g.D), ks, Dp + 1, A(1));
  load_rows<BK, Dp>(v + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, static_cast<int>(g.D), vs, Dp + 1, A(1));
}

// What a backward kernel reads of query rows [t0, t0 + nq) of head h: Q·scale and dO into qs and dos
// ([BQ][Dp+1]), lse and Di into lse_s and di_s (−inf and 0 past the nq real rows).
template <int BQ, int Dp, typename A>
__device__ __forceinline__ void load_query_rows(const Geometry& g, const A* __restrict__ q, const A* __restrict__ dout,
                                                const A* __restrict__ lse, const A* __restrict__ di, i64 b, i64 h,
                                                i64 t0, int nq, A* qs, A* dos, A* lse_s, A* di_s) {
  load_rows<BQ, Dp>(q + g.q_row(b, t0, h), g.H * g.D, nq, static_cast<int>(g.D), qs, Dp + 1, static_cast<A>(g.scale));
  load_rows<BQ, Dp>(dout + g.q_row(b, t0, h), g.H * g.D, nq, static_cast<int>(g.D), dos, Dp + 1, A(1));
  for (int r = static_cast<int>(threadIdx.x); r < BQ; r += kFmaThreads) {
    lse_s[r] = r < nq ? lse[g.stat(b, h, t0 + r)] : negative_infinity<A>();
    di_s[r] = r < nq ? di[g.stat(b, h, t0 + r)] : A(0);
  }
}

// Thread (tr, tc)'s part of an [I·16 rows][Dp] accumulator tile, written out: row r = tr + 16i (r < n) and
// column d = tc + 16j (d < D) go to row_start(r)[d] as acc[i][j]·factor(r).
template <int I, int J, typename A, typename Row, typename Factor>
__device__ __forceinline__ void store_tile(const A (&acc)[I][J], int tr, int tc, int n, int D, Row row_start,
                                           Factor factor) {
#pragma unroll
  for (int i = 0; i < I; ++i) {
    const int r = tr + 16 * i;
    if (r >= n) continue;
    A* dst = row_start(r);
    const A f = factor(r);
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int d = tc + 16 * j;
      if (d < D) dst[d] = acc[i][j] * f;
    }
  }
}

// P = exp(score + mask − lse) recomputed for query t and key s, 0 where t does not see s or its row has no
// visible key.
template <typename A>
__device__ __forceinline__ A recomputed_probability(const Geometry& g, const A* __restrict__ mask, i64 b, i64 t, i64 s,
                                                    A score, A row_lse) {
  A p = 0;
  if (row_lse != negative_infinity<A>() && g.sees(b, t, s)) p = exp_acc(score + mask_value(mask, g, t, s) - row_lse);
  return p;
}

// Block (b, h, query tile of BQ rows). Shared: Q·scale [BQ][Dp+1], K and V [BK][Dp+1], scores [BQ][BK+1],
// and per row the running max, sum and the last rescale factor.
template <typename A, int Dp, int BQ, int BK>
__global__ void __launch_bounds__(kFmaThreads)
    forward_fma_kernel(Geometry g, int q_tiles, const A* __restrict__ q, const A* __restrict__ k,
                       const A* __restrict__ v, const A* __restrict__ mask, A* __restrict__ out, A* __restrict__ lse) {
  constexpr int LD = Dp + 1, LDP = BK + 1, RI = BQ / 16, CJ = BK / 16, DJ = Dp / 16;
  extern __shared__ __align__(16) unsigned char smem[];
  A* qs = reinterpret_cast<A*>(smem);
  A* ks = qs + BQ * LD;
  A* vs = ks + BK * LD;
  A* ps = vs + BK * LD;
  A* row_max = ps + BQ * LDP;
  A* row_sum = row_max + BQ;
  A* row_alpha = row_sum + BQ;

  const int tid = static_cast<int>(threadIdx.x), tr = tid / 16, tc = tid % 16, warp = tid / 32, lane = tid % 32;
  const QueryTile tile = query_tile(g, q_tiles, BQ);  // named: C++17 lambdas cannot capture the bindings
  const auto& [b, h, hk, t0, nq] = tile;
  const int D = static_cast<int>(g.D);
  const A neg_inf = negative_infinity<A>();

  load_rows<BQ, Dp>(q + g.q_row(b, t0, h), g.H * g.D, nq, D, qs, LD, static_cast<A>(g.scale));
  for (int r = tid; r < BQ; r += kFmaThreads) {
    row_max[r] = neg_inf;
    row_sum[r] = A(0);
  }
  A o[RI][DJ] = {};
  const i64 kv_end = g.kv_end(t0, nq);
  __syncthreads();
  for (i64 s0 = g.kv_begin(b, t0) / BK * BK; s0 < kv_end; s0 += BK) {
    __syncthreads();
    load_kv_rows<BK, Dp>(g, k, v, b, hk, s0, static_cast<int>(imin(BK, g.S - s0)), ks, vs);
    __syncthreads();

    A acc[RI][CJ] = {};
    tile_product<RI, CJ, Dp, LD, LD, 1>(qs, ks, tr, tc, acc);  // S = Q·Kᵀ
#pragma unroll
    for (int i = 0; i < RI; ++i) {
#pragma unroll
      for (int j = 0; j < CJ; ++j) {
        const int r = tr + 16 * i, c = tc + 16 * j;
        const i64 t = t0 + r, s = s0 + c;
        ps[r * LDP + c] = g.sees(b, t, s) ? acc[i][j] + mask_value(mask, g, t, s) : neg_inf;
      }
    }
    __syncthreads();

    // Online softmax, one warp per row.
    for (int r = warp; r < BQ; r += kFmaThreads / 32) {
      A mx = neg_inf;
      for (int c = lane; c < BK; c += 32) mx = max_acc(mx, ps[r * LDP + c]);
      mx = warp_max(mx);
      const A m_old = row_max[r], m_new = max_acc(m_old, mx);
      A sum = 0;
      for (int c = lane; c < BK; c += 32) {
        const A p = m_new == neg_inf ? A(0) : exp_acc(ps[r * LDP + c] - m_new);
        // With dropout, P·V takes p times its keep factor; the sum (lse) stays P's.
        ps[r * LDP + c] = g.dropout && p != A(0) ? p * g.keep<A>(b, h, t0 + r, s0 + c) : p;
        sum += p;
      }
      sum = warp_sum(sum);
      __syncwarp();  // every lane has read row_max[r] (m_old) before lane 0 replaces it
      if (lane == 0) {
        const A alpha = m_new == neg_inf ? A(1) : exp_acc(m_old - m_new);
        row_alpha[r] = alpha;
        row_sum[r] = row_sum[r] * alpha + sum;
        row_max[r] = m_new;
      }
    }
    __syncthreads();

    // O = O·alpha + P·V.
#pragma unroll
    for (int i = 0; i < RI; ++i) {
      const A alpha = row_alpha[tr + 16 * i];
#pragma unroll
      for (int j = 0; j < DJ; ++j) o[i][j] *= alpha;
    }
    tile_product<RI, DJ, BK, LDP, 1, LD>(ps, vs, tr, tc, o);  // O += P·V
  }

  store_tile(
      o, tr, tc, nq, D, [&](int r) { return out + g.q_row(tile.b, tile.t0 + r, tile.h); },
      [&](int r) { return row_sum[r] > A(0) ? A(1) / row_sum[r] : A(0); });
  for (int r = tid; r < nq; r += kFmaThreads) {
    lse[g.stat(b, h, t0 + r)] = row_sum[r] > A(0) ? row_max[r] + log_acc(row_sum[r]) : neg_inf;
  }
}

// The backward kernels' tensors (attention.h's layouts), one value for both kernels and their launches.
template <typename A>
struct BackwardTensors {
  const A *q, *k, *v, *mask, *dout, *lse, *di;
  A *dq, *dk, *dv;
};

// Block (b, kv head, key tile of BK keys): dK and dV over the group's heads and the query tiles, in order.
// Shared: K, V [BK][Dp+1]; Q·scale, dO [BQ][Dp+1]; Pᵀ, dSᵀ [BK][BQ+1]; lse, Di [BQ].
template <typename A, int Dp, int BK, int BQ>
__global__ void __launch_bounds__(kFmaThreads) backward_kv_fma_kernel(Geometry g, int k_tiles, BackwardTensors<A> t) {
  constexpr int LD = Dp + 1, LDP = BQ + 1, KI = BK / 16, QJ = BQ / 16, DJ = Dp / 16;
  extern __shared__ __align__(16) unsigned char smem[];
  A* ks = reinterpret_cast<A*>(smem);
  A* vs = ks + BK * LD;
  A* qs = vs + BK * LD;
  A* dos = qs + BQ * LD;
  A* pt = dos + BQ * LD;
  A* dst = pt + BK * LDP;
  A* lse_s = dst + BK * LDP;
  A* di_s = lse_s + BQ;

  const int tid = static_cast<int>(threadIdx.x), tr = tid / 16, tc = tid % 16;
  const i64 block = blockIdx.x;
  const i64 kt = block % k_tiles, hk = block / k_tiles % g.Hkv, b = block / k_tiles / g.Hkv;
  const i64 s0 = kt * BK;
  const int nk = static_cast<int>(imin(BK, g.S - s0));
  const int D = static_cast<int>(g.D);

  load_kv_rows<BK, Dp>(g, t.k, t.v, b, hk, s0, nk, ks, vs);

  A dk_acc[KI][DJ] = {}, dv_acc[KI][DJ] = {};
  const i64 t_first = g.q_begin(s0), t_end = g.q_end(s0, nk);  // the queries that see a key of the tile
  for (i64 h = hk * g.group; h < (hk + 1) * g.group; ++h) {
    for (i64 t0 = t_first / BQ * BQ; t_first < t_end && t0 < t_end; t0 += BQ) {  // (empty: a pair's later keys)
      const int nq = static_cast<int>(imin(BQ, g.T - t0));
      __syncthreads();
      load_query_rows<BQ, Dp>(g, t.q, t.dout, t.lse, t.di, b, h, t0, nq, qs, dos, lse_s, di_s);
      __syncthreads();

      A st[KI][QJ] = {}, dpt[KI][QJ] = {};
      tile_products2<KI, QJ, Dp, LD, LD, 1>(ks, vs, qs, dos, tr, tc, st, dpt);  // Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ
#pragma unroll
      for (int i = 0; i < KI; ++i) {
#pragma unroll
        for (int j = 0; j < QJ; ++j) {
          const int kr = tr + 16 * i, qc = tc + 16 * j;
          const A p = recomputed_probability(g, t.mask, b, t0 + qc, s0 + kr, st[i][j], lse_s[qc]);
          // With dropout: Zᵀ = Pᵀ ∘ keep multiplies dO into dV, and dP = keep ∘ dZ.
          const A keep = g.dropout && p != A(0) ? g.keep<A>(b, h, t0 + qc, s0 + kr) : A(1);
          pt[kr * LDP + qc] = p * keep;
          dst[kr * LDP + qc] = p * (dpt[i][j] * keep - di_s[qc]);
        }
      }
      __syncthreads();

      // dV += Pᵀ·dO, dK += dSᵀ·Q
      tile_products2<KI, DJ, BQ, LDP, 1, LD>(pt, dst, dos, qs, tr, tc, dv_acc, dk_acc);
    }
  }

  const auto one = [](int) { return A(1); };
  store_tile(
      dk_acc, tr, tc, nk, D, [&](int r) { return t.dk + g.kv_row(b, s0 + r, hk); }, one);
  store_tile(
      dv_acc, tr, tc, nk, D, [&](int r) { return t.dv + g.kv_row(b, s0 + r, hk); }, one);
}

// Block (b, h, query tile of BQ rows): dQ = scale · Σ_key tiles dS·K, in order.
// Shared: Q·scale, dO [BQ][Dp+1]; K, V [BK][Dp+1]; dS [BQ][BK+1]; lse, Di [BQ].
template <typename A, int Dp, int BQ, int BK>
__global__ void __launch_bounds__(kFmaThreads) backward_q_fma_kernel(Geometry g, int q_tiles, BackwardTensors<A> t) {
  constexpr int LD = Dp + 1, LDS = BK + 1, QI = BQ / 16, KJ = BK / 16, DJ = Dp / 16;
  extern __shared__ __align__(16) unsigned char smem[];
  A* qs = reinterpret_cast<A*>(smem);
  A* dos = qs + BQ * LD;
  A* ks = dos + BQ * LD;
  A* vs = ks + BK * LD;
  A* dss = vs + BK * LD;
  A* lse_s = dss + BQ * LDS;
  A* di_s = lse_s + BQ;

  const int tid = static_cast<int>(threadIdx.x), tr = tid / 16, tc = tid % 16;
  const QueryTile tile = query_tile(g, q_tiles, BQ);  // named: C++17 lambdas cannot capture the bindings
  const auto& [b, h, hk, t0, nq] = tile;
  const int D = static_cast<int>(g.D);
  const A scale = static_cast<A>(g.scale);

  load_query_rows<BQ, Dp>(g, t.q, t.dout, t.lse, t.di, b, h, t0, nq, qs, dos, lse_s, di_s);

  A acc[QI][DJ] = {};
  const i64 kv_end = g.kv_end(t0, nq);
  for (i64 s0 = g.kv_begin(b, t0) / BK * BK; s0 < kv_end; s0 += BK) {
    __syncthreads();
    load_kv_rows<BK, Dp>(g, t.k, t.v, b, hk, s0, static_cast<int>(imin(BK, g.S - s0)), ks, vs);
    __syncthreads();

    A sc[QI][KJ] = {}, dp[QI][KJ] = {};
    tile_products2<QI, KJ, Dp, LD, LD, 1>(qs, dos, ks, vs, tr, tc, sc, dp);  // S = Q·Kᵀ, dP = dO·Vᵀ
#pragma unroll
    for (int i = 0; i < QI; ++i) {
#pragma unroll
      for (int j = 0; j < KJ; ++j) {
        const int qr = tr + 16 * i, kc = tc + 16 * j;
        const A p = recomputed_probability(g, t.mask, b, t0 + qr, s0 + kc, sc[i][j], lse_s[qr]);
        const A keep = g.dropout && p != A(0) ? g.keep<A>(b, h, t0 + qr, s0 + kc) : A(1);  // dP = keep ∘ dZ
        dss[qr * LDS + kc] = p * (dp[i][j] * keep - di_s[qr]);
      }
    }
    __syncthreads();

    tile_product<QI, DJ, BK, LDS, 1, LD>(dss, ks, tr, tc, acc);  // dQ += dS·K
  }

  store_tile(
      acc, tr, tc, nq, D, [&](int r) { return t.dq + g.q_row(tile.b, tile.t0 + r, tile.h); },
      [&](int) { return scale; });
}

// ======================================================================================================
// Di = Σ_d dout·out, one warp per query row, into [B, H, T] (Acc<T>).
// ======================================================================================================

constexpr int kRowThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    row_dot_kernel(Geometry g, const T* __restrict__ out, const T* __restrict__ dout, Acc<T>* __restrict__ di) {
  const i64 rows = g.B * g.T * g.H;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const i64 warps = static_cast<i64>(gridDim.x) * (kRowThreads / 32);
  for (i64 row = (static_cast<i64>(blockIdx.x) * kRowThreads + threadIdx.x) / 32; row < rows; row += warps) {
    Acc<T> s = 0;
    for (i64 d = lane; d < g.D; d += 32) s += load(out + row * g.D + d) * load(dout + row * g.D + d);
    s = warp_sum(s);
    if (lane == 0) {
      const i64 h = row % g.H, t = row / g.H % g.T, b = row / (g.H * g.T);
      di[g.stat(b, h, t)] = s;
    }
  }
}

template <typename A>
void forward_fma(const Geometry& g, const A* q, const A* k, const A* v, const A* mask, A* out, A* lse) {
  constexpr int BQ = FmaTiles<A>::forward_q, BK = FmaTiles<A>::forward_k;
  const i64 q_tiles = ceil_div(g.T, BQ);
  dispatch_head_dim(g.D, [&](auto dp) {
    constexpr int Dp = decltype(dp)::value;
    const std::size_t smem =
        (static_cast<std::size_t>(BQ + 2 * BK) * (Dp + 1) + static_cast<std::size_t>(BQ) * (BK + 1) + 3 * BQ) *
        sizeof(A);
    launch(forward_fma_kernel<A, Dp, BQ, BK>, q_tiles * g.H * g.B, kFmaThreads, smem, "attention", g,
           static_cast<int>(q_tiles), q, k, v, mask, out, lse);
  });
}

template <typename A>
void backward_fma(const Geometry& g, const A* q, const A* k, const A* v, const A* mask, const A* dout, const A* lse,
                  const A* di, A* dq, A* dk, A* dv) {
  constexpr int BT = FmaTiles<A>::backward;  // keys and queries per tile
  const i64 q_tiles = ceil_div(g.T, BT), k_tiles = ceil_div(g.S, BT);
  dispatch_head_dim(g.D, [&](auto dp) {
    constexpr int Dp = decltype(dp)::value;
    const std::size_t smem =
        (static_cast<std::size_t>(4 * BT) * (Dp + 1) + static_cast<std::size_t>(2 * BT) * (BT + 1) + 2 * BT) *
        sizeof(A);
    const BackwardTensors<A> t{q, k, v, mask, dout, lse, di, dq, dk, dv};
    launch(backward_kv_fma_kernel<A, Dp, BT, BT>, k_tiles * g.Hkv * g.B, kFmaThreads, smem,
           "attention_backward (dk, dv)", g, static_cast<int>(k_tiles), t);
    launch(backward_q_fma_kernel<A, Dp, BT, BT>, q_tiles * g.H * g.B, kFmaThreads, smem, "attention_backward (dq)", g,
           static_cast<int>(q_tiles), t);
  });
}
// One warp per (b, row, h) of the part: lane d covers columns d + 32j.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    merge_kernel(cpu::AttentionMergeDims d, Acc<T>* __restrict__ out, Acc<T>* __restrict__ lse,
                 const T* __restrict__ part_out, const Acc<T>* __restrict__ part_lse) {
  using A = Acc<T>;
  const i64 rows = d.batch * d.part_rows * d.heads;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const i64 warps = static_cast<i64>(gridDim.x) * (kRowThreads / 32);
  for (i64 r = (static_cast<i64>(blockIdx.x) * kRowThreads + threadIdx.x) / 32; r < rows; r += warps) {
    const i64 h = r % d.heads, t = r / d.heads % d.part_rows, b = r / (d.heads * d.part_rows);
    const i64 row = d.row_begin + t;
    A* l = lse + (b * d.heads + h) * d.rows + row;
    const A old_l = *l, pl = part_lse[(b * d.heads + h) * d.part_rows + t];
    const A m = old_l > pl ? old_l : pl;
    if (m == negative_infinity<A>()) continue;
    const A wa = exp_acc(old_l - m), wb = exp_acc(pl - m), sum = wa + wb;
    const A fa = wa / sum, fb = wb / sum;
    A* o = out + ((b * d.rows + row) * d.heads + h) * d.head_dim;
    const T* po = part_out + ((b * d.part_rows + t) * d.heads + h) * d.head_dim;
    for (i64 i = lane; i < d.head_dim; i += 32) o[i] = fa * o[i] + fb * load(po + i);
    __syncwarp();
    if (lane == 0) *l = m + log_acc(sum);
  }
}

}  // namespace

void launch_attention_merge(DType dtype, const cpu::AttentionMergeDims& dims, void* out, void* lse,
                            const void* part_out, const void* part_lse) {
  const i64 rows = dims.batch * dims.part_rows * dims.heads;
  if (rows == 0 || dims.head_dim == 0) return;
  dispatch_floating(dtype, "attention_merge", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    merge_kernel<T><<<blocks_for(rows * 32, kRowThreads), kRowThreads, 0, stream()>>>(
        dims, static_cast<A*>(out), static_cast<A*>(lse), static_cast<const T*>(part_out),
        static_cast<const A*>(part_lse));
    check_launch("attention_merge");
  });
}

void launch_attention_forward(DType dtype, const cpu::AttentionDims& dims, const void* q, const void* k, const void* v,
                              const void* mask, const void* key_mask, const std::int32_t* doc_starts, void* out,
                              void* lse) {
  using namespace attention_detail;
  if (dims.layout.blocks != nullptr) return launch_block_sparse_forward(dtype, dims, q, k, v, key_mask, out, lse);
  const Geometry g = make_geometry(dims, key_mask, doc_starts);
  if (g.B == 0 || g.H == 0 || g.T == 0) return;
  dispatch_floating(dtype, "attention", [&](auto tag) {
    using T = decltype(tag);
    const T* tq = static_cast<const T*>(q);
    const T* tk = static_cast<const T*>(k);
    const T* tv = static_cast<const T*>(v);
    if constexpr (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>) {
      forward_mma(g, tq, tk, tv, static_cast<const T*>(mask), static_cast<T*>(out), static_cast<float*>(lse));
    } else {
      forward_fma(g, tq, tk, tv, static_cast<const T*>(mask), static_cast<T*>(out), static_cast<T*>(lse));
    }
  });
}

void launch_attention_backward(DType dtype, const cpu::AttentionDims& dims, const void* q, const void* k, const void* v,
                               const void* mask, const void* key_mask, const std::int32_t* doc_starts,
                               const void* out, const void* lse, const void* dout, void* dq, void* dk, void* dv,
                               void* di) {
  using namespace attention_detail;
  const Geometry g = make_geometry(dims, key_mask, doc_starts);
  if (g.B == 0 || g.H == 0) return;
  dispatch_floating(dtype, "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const i64 rows = g.B * g.T * g.H;
    if (rows > 0) {
      row_dot_kernel<T><<<blocks_for(rows * 32, kRowThreads), kRowThreads, 0, stream()>>>(
          g, static_cast<const T*>(out), static_cast<const T*>(dout), static_cast<A*>(di));
      check_launch("attention_backward (Di)");
    }
    if (dims.layout.blocks != nullptr) {
      launch_block_sparse_backward(dtype, dims, q, k, v, key_mask, lse, dout, di, dq, dk, dv);
      return;
    }
    const T* tq = static_cast<const T*>(q);
    const T* tk = static_cast<const T*>(k);
    const T* tv = static_cast<const T*>(v);
    const T* tmask = static_cast<const T*>(mask);
    const T* tdout = static_cast<const T*>(dout);
    if constexpr (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>) {
      backward_mma(g, tq, tk, tv, tmask, tdout, static_cast<const float*>(lse), static_cast<const float*>(di),
                   static_cast<T*>(dq), static_cast<T*>(dk), static_cast<T*>(dv));
    } else {
      backward_fma(g, tq, tk, tv, tmask, tdout, static_cast<const A*>(lse), static_cast<const A*>(di),
                   static_cast<T*>(dq), static_cast<T*>(dk), static_cast<T*>(dv));
    }
  });
}

}  // namespace trident::kernels::cuda
