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
// key gets out = 0 and lse = −inf. Backward: Di = Σ_d dout·out per row (its own kernel), then
// P = exp(S − lse) recomputed, dS = P ∘ (dP − Di); one kernel per (batch, kv head, key tile) owns dK and
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
  const i64 block = blockIdx.x;
  const i64 qt = q_tiles - 1 - block % q_tiles;
  const i64 h = block / q_tiles % g.H, b = block / q_tiles / g.H, hk = h / g.group;
  const i64 t0 = qt * BQ;
  const int nq = static_cast<int>(imin(BQ, g.T - t0));
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
  for (i64 s0 = g.kv_begin(t0) / BK * BK; s0 < kv_end; s0 += BK) {
    const int nk = static_cast<int>(imin(BK, g.S - s0));
    __syncthreads();
    load_rows<BK, Dp>(k + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, ks, LD, A(1));
    load_rows<BK, Dp>(v + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, vs, LD, A(1));
    __syncthreads();

    A acc[RI][CJ] = {};
    for (int d = 0; d < Dp; ++d) {
      A qv[RI], kv[CJ];
#pragma unroll
      for (int i = 0; i < RI; ++i) qv[i] = qs[(tr + 16 * i) * LD + d];
#pragma unroll
      for (int j = 0; j < CJ; ++j) kv[j] = ks[(tc + 16 * j) * LD + d];
#pragma unroll
      for (int i = 0; i < RI; ++i)
#pragma unroll
        for (int j = 0; j < CJ; ++j) acc[i][j] += qv[i] * kv[j];
    }
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
        ps[r * LDP + c] = p;
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
    for (int c = 0; c < BK; ++c) {
      A pv[RI], vv[DJ];
#pragma unroll
      for (int i = 0; i < RI; ++i) pv[i] = ps[(tr + 16 * i) * LDP + c];
#pragma unroll
      for (int j = 0; j < DJ; ++j) vv[j] = vs[c * LD + tc + 16 * j];
#pragma unroll
      for (int i = 0; i < RI; ++i)
#pragma unroll
        for (int j = 0; j < DJ; ++j) o[i][j] += pv[i] * vv[j];
    }
  }

#pragma unroll
  for (int i = 0; i < RI; ++i) {
    const int r = tr + 16 * i;
    if (r >= nq) continue;
    const A l = row_sum[r];
    const A inv = l > A(0) ? A(1) / l : A(0);
#pragma unroll
    for (int j = 0; j < DJ; ++j) {
      const int d = tc + 16 * j;
      if (d < D) out[g.q_row(b, t0 + r, h) + d] = o[i][j] * inv;
    }
  }
  for (int r = tid; r < nq; r += kFmaThreads) {
    lse[g.stat(b, h, t0 + r)] = row_sum[r] > A(0) ? row_max[r] + log_acc(row_sum[r]) : neg_inf;
  }
}

// Block (b, kv head, key tile of BK keys): dK and dV over the group's heads and the query tiles, in order.
// Shared: K, V [BK][Dp+1]; Q·scale, dO [BQ][Dp+1]; Pᵀ, dSᵀ [BK][BQ+1]; lse, Di [BQ].
template <typename A, int Dp, int BK, int BQ>
__global__ void __launch_bounds__(kFmaThreads)
    backward_kv_fma_kernel(Geometry g, int k_tiles, const A* __restrict__ q, const A* __restrict__ k,
                           const A* __restrict__ v, const A* __restrict__ mask, const A* __restrict__ dout,
                           const A* __restrict__ lse, const A* __restrict__ di, A* __restrict__ dk,
                           A* __restrict__ dv) {
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
  const A scale = static_cast<A>(g.scale), neg_inf = negative_infinity<A>();

  load_rows<BK, Dp>(k + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, ks, LD, A(1));
  load_rows<BK, Dp>(v + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, vs, LD, A(1));

  A dk_acc[KI][DJ] = {}, dv_acc[KI][DJ] = {};
  const i64 t_first = g.q_begin(s0), t_end = g.q_end(s0, nk);  // the queries that see a key of the tile
  for (i64 h = hk * g.group; h < (hk + 1) * g.group; ++h) {
    for (i64 t0 = t_first / BQ * BQ; t0 < t_end; t0 += BQ) {
      const int nq = static_cast<int>(imin(BQ, g.T - t0));
      __syncthreads();
      load_rows<BQ, Dp>(q + g.q_row(b, t0, h), g.H * g.D, nq, D, qs, LD, scale);
      load_rows<BQ, Dp>(dout + g.q_row(b, t0, h), g.H * g.D, nq, D, dos, LD, A(1));
      for (int r = tid; r < BQ; r += kFmaThreads) {
        lse_s[r] = r < nq ? lse[g.stat(b, h, t0 + r)] : neg_inf;
        di_s[r] = r < nq ? di[g.stat(b, h, t0 + r)] : A(0);
      }
      __syncthreads();

      A st[KI][QJ] = {}, dpt[KI][QJ] = {};
      for (int d = 0; d < Dp; ++d) {
        A kv[KI], vv[KI], qv[QJ], dov[QJ];
#pragma unroll
        for (int i = 0; i < KI; ++i) {
          kv[i] = ks[(tr + 16 * i) * LD + d];
          vv[i] = vs[(tr + 16 * i) * LD + d];
        }
#pragma unroll
        for (int j = 0; j < QJ; ++j) {
          qv[j] = qs[(tc + 16 * j) * LD + d];
          dov[j] = dos[(tc + 16 * j) * LD + d];
        }
#pragma unroll
        for (int i = 0; i < KI; ++i) {
#pragma unroll
          for (int j = 0; j < QJ; ++j) {
            st[i][j] += kv[i] * qv[j];
            dpt[i][j] += vv[i] * dov[j];
          }
        }
      }
#pragma unroll
      for (int i = 0; i < KI; ++i) {
#pragma unroll
        for (int j = 0; j < QJ; ++j) {
          const int kr = tr + 16 * i, qc = tc + 16 * j;
          const i64 s = s0 + kr, t = t0 + qc;
          A p = 0;
          if (lse_s[qc] != neg_inf && g.sees(b, t, s)) p = exp_acc(st[i][j] + mask_value(mask, g, t, s) - lse_s[qc]);
          pt[kr * LDP + qc] = p;
          dst[kr * LDP + qc] = p * (dpt[i][j] - di_s[qc]);
        }
      }
      __syncthreads();

      for (int c = 0; c < BQ; ++c) {
        A pv[KI], dsv[KI], dov[DJ], qv[DJ];
#pragma unroll
        for (int i = 0; i < KI; ++i) {
          pv[i] = pt[(tr + 16 * i) * LDP + c];
          dsv[i] = dst[(tr + 16 * i) * LDP + c];
        }
#pragma unroll
        for (int j = 0; j < DJ; ++j) {
          dov[j] = dos[c * LD + tc + 16 * j];
          qv[j] = qs[c * LD + tc + 16 * j];
        }
#pragma unroll
        for (int i = 0; i < KI; ++i) {
#pragma unroll
          for (int j = 0; j < DJ; ++j) {
            dv_acc[i][j] += pv[i] * dov[j];
            dk_acc[i][j] += dsv[i] * qv[j];
          }
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < KI; ++i) {
    const int kr = tr + 16 * i;
    if (kr >= nk) continue;
#pragma unroll
    for (int j = 0; j < DJ; ++j) {
      const int d = tc + 16 * j;
      if (d < D) {
        dk[g.kv_row(b, s0 + kr, hk) + d] = dk_acc[i][j];
        dv[g.kv_row(b, s0 + kr, hk) + d] = dv_acc[i][j];
      }
    }
  }
}

// Block (b, h, query tile of BQ rows): dQ = scale · Σ_key tiles dS·K, in order.
// Shared: Q·scale, dO [BQ][Dp+1]; K, V [BK][Dp+1]; dS [BQ][BK+1]; lse, Di [BQ].
template <typename A, int Dp, int BQ, int BK>
__global__ void __launch_bounds__(kFmaThreads)
    backward_q_fma_kernel(Geometry g, int q_tiles, const A* __restrict__ q, const A* __restrict__ k,
                          const A* __restrict__ v, const A* __restrict__ mask, const A* __restrict__ dout,
                          const A* __restrict__ lse, const A* __restrict__ di, A* __restrict__ dq) {
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
  const i64 block = blockIdx.x;
  const i64 qt = q_tiles - 1 - block % q_tiles;
  const i64 h = block / q_tiles % g.H, b = block / q_tiles / g.H, hk = h / g.group;
  const i64 t0 = qt * BQ;
  const int nq = static_cast<int>(imin(BQ, g.T - t0));
  const int D = static_cast<int>(g.D);
  const A scale = static_cast<A>(g.scale), neg_inf = negative_infinity<A>();

  load_rows<BQ, Dp>(q + g.q_row(b, t0, h), g.H * g.D, nq, D, qs, LD, scale);
  load_rows<BQ, Dp>(dout + g.q_row(b, t0, h), g.H * g.D, nq, D, dos, LD, A(1));
  for (int r = tid; r < BQ; r += kFmaThreads) {
    lse_s[r] = r < nq ? lse[g.stat(b, h, t0 + r)] : neg_inf;
    di_s[r] = r < nq ? di[g.stat(b, h, t0 + r)] : A(0);
  }

  A acc[QI][DJ] = {};
  const i64 kv_end = g.kv_end(t0, nq);
  for (i64 s0 = g.kv_begin(t0) / BK * BK; s0 < kv_end; s0 += BK) {
    const int nk = static_cast<int>(imin(BK, g.S - s0));
    __syncthreads();
    load_rows<BK, Dp>(k + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, ks, LD, A(1));
    load_rows<BK, Dp>(v + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, vs, LD, A(1));
    __syncthreads();

    A sc[QI][KJ] = {}, dp[QI][KJ] = {};
    for (int d = 0; d < Dp; ++d) {
      A qv[QI], dov[QI], kv[KJ], vv[KJ];
#pragma unroll
      for (int i = 0; i < QI; ++i) {
        qv[i] = qs[(tr + 16 * i) * LD + d];
        dov[i] = dos[(tr + 16 * i) * LD + d];
      }
#pragma unroll
      for (int j = 0; j < KJ; ++j) {
        kv[j] = ks[(tc + 16 * j) * LD + d];
        vv[j] = vs[(tc + 16 * j) * LD + d];
      }
#pragma unroll
      for (int i = 0; i < QI; ++i) {
#pragma unroll
        for (int j = 0; j < KJ; ++j) {
          sc[i][j] += qv[i] * kv[j];
          dp[i][j] += dov[i] * vv[j];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < QI; ++i) {
#pragma unroll
      for (int j = 0; j < KJ; ++j) {
        const int qr = tr + 16 * i, kc = tc + 16 * j;
        const i64 t = t0 + qr, s = s0 + kc;
        A p = 0;
        if (lse_s[qr] != neg_inf && g.sees(b, t, s)) p = exp_acc(sc[i][j] + mask_value(mask, g, t, s) - lse_s[qr]);
        dss[qr * LDS + kc] = p * (dp[i][j] - di_s[qr]);
      }
    }
    __syncthreads();

    for (int c = 0; c < BK; ++c) {
      A dsv[QI], kv[DJ];
#pragma unroll
      for (int i = 0; i < QI; ++i) dsv[i] = dss[(tr + 16 * i) * LDS + c];
#pragma unroll
      for (int j = 0; j < DJ; ++j) kv[j] = ks[c * LD + tc + 16 * j];
#pragma unroll
      for (int i = 0; i < QI; ++i)
#pragma unroll
        for (int j = 0; j < DJ; ++j) acc[i][j] += dsv[i] * kv[j];
    }
  }

#pragma unroll
  for (int i = 0; i < QI; ++i) {
    const int qr = tr + 16 * i;
    if (qr >= nq) continue;
#pragma unroll
    for (int j = 0; j < DJ; ++j) {
      const int d = tc + 16 * j;
      if (d < D) dq[g.q_row(b, t0 + qr, h) + d] = acc[i][j] * scale;
    }
  }
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
    launch(backward_kv_fma_kernel<A, Dp, BT, BT>, k_tiles * g.Hkv * g.B, kFmaThreads, smem,
           "attention_backward (dk, dv)", g, static_cast<int>(k_tiles), q, k, v, mask, dout, lse, di, dk, dv);
    launch(backward_q_fma_kernel<A, Dp, BT, BT>, q_tiles * g.H * g.B, kFmaThreads, smem, "attention_backward (dq)", g,
           static_cast<int>(q_tiles), q, k, v, mask, dout, lse, di, dq);
  });
}
}  // namespace

void launch_attention_forward(DType dtype, const cpu::AttentionDims& dims, const void* q, const void* k, const void* v,
                              const void* mask, const void* key_mask, void* out, void* lse) {
  using namespace attention_detail;
  const Geometry g = make_geometry(dims, key_mask);
  if (g.B == 0 || g.H == 0 || g.T == 0) return;
  switch (dtype) {
    case DType::bf16: {
      using T = __nv_bfloat16;
      forward_mma(g, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                  static_cast<const T*>(mask), static_cast<T*>(out), static_cast<float*>(lse));
      return;
    }
    case DType::f16: {
      using T = __half;
      forward_mma(g, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                  static_cast<const T*>(mask), static_cast<T*>(out), static_cast<float*>(lse));
      return;
    }
    case DType::f32: {
      using A = float;
      forward_fma(g, static_cast<const A*>(q), static_cast<const A*>(k), static_cast<const A*>(v),
                  static_cast<const A*>(mask), static_cast<A*>(out), static_cast<A*>(lse));
      return;
    }
    case DType::f64: {
      using A = double;
      forward_fma(g, static_cast<const A*>(q), static_cast<const A*>(k), static_cast<const A*>(v),
                  static_cast<const A*>(mask), static_cast<A*>(out), static_cast<A*>(lse));
      return;
    }
    default:
      unsupported_dtype("attention", dtype, "f32, f64, bf16 or f16");
  }
}

void launch_attention_backward(DType dtype, const cpu::AttentionDims& dims, const void* q, const void* k, const void* v,
                               const void* mask, const void* key_mask, const void* out, const void* lse,
                               const void* dout, void* dq, void* dk, void* dv, void* di) {
  using namespace attention_detail;
  const Geometry g = make_geometry(dims, key_mask);
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
