// Flash attention on the GPU (contract: kernels/cpu/attention.h; launch shapes: attention.h).
//
// bf16/f16 run on tensor cores (mma.sync m16n8k16, f32 accumulators): a block of 4 warps owns a 64-row
// tile, each warp 16 rows; the other operand streams through shared memory in 64-row tiles. An
// accumulator fragment of one product (S, P) is, element for element, the A fragment of the next, so
// P never leaves registers. Every B operand is read from shared memory as pairs along its k dimension:
// K and V tiles row-major ([key][d]) where d is k, transposed copies ([d][key] or [d][query]) where the
// key or query index is k. Rows are padded by 8 elements so that the 32 lanes of a fragment load hit 32
// different banks.
//
// f32 and f64 run a plain FMA version of the same tiling (no TF32, so f32 follows the CPU to 1e-5): 256
// threads as a 16×16 grid, thread (r, c) owning rows r + 16i and columns c + 16j of every tile product;
// Q is pre-multiplied by the scale as on the CPU.
//
// Forward: online softmax per query row in f32 (f64) — running max m and sum l, the output rescaled by
// exp(m_old − m_new); keys past the last visible one of the tile are never loaded; a row with no visible
// key gets out = 0 and lse = −inf. Backward: Di = Σ_d dout·out per row (its own kernel), then
// P = exp(S − lse) recomputed, dS = P ∘ (dP − Di); one kernel per (batch, kv head, key tile) owns dK and
// dV and sums over the group's heads and the query tiles in order, one per (batch, head, query tile) owns
// dQ and sums over key tiles in order. Nothing is written by two blocks and no float atomics are used, so
// results are bit-identical from run to run.
#include <cstring>

#include "trident/kernels/cuda/attention_launch.h"
#include "trident/kernels/cuda/common.cuh"

namespace trident::kernels::cuda {

namespace {

using i64 = std::int64_t;

// Dimensions and element offsets into q/out/dout [B, T, H, D], k/v [B, S, Hkv, D] and lse/Di [B, H, T].
struct Geometry {
  i64 B, T, S, H, Hkv, D, group, shift;
  bool causal;
  double scale;

  __device__ i64 q_row(i64 b, i64 t, i64 h) const { return ((b * T + t) * H + h) * D; }
  __device__ i64 kv_row(i64 b, i64 s, i64 hk) const { return ((b * S + s) * Hkv + hk) * D; }
  __device__ i64 stat(i64 b, i64 h, i64 t) const { return (b * H + h) * T + t; }
  // Keys [0, kv_end) are visible to some query of the tile of nq rows from t0.
  __device__ i64 kv_end(i64 t0, i64 nq) const {
    if (!causal) return S;
    const i64 e = t0 + nq + shift;
    return e < 0 ? 0 : (e > S ? S : e);
  }
  // Query t sees key s (bottom-right aligned causal mask; t and s may lie past the tensors).
  __device__ bool visible(i64 t, i64 s) const { return t < T && s < S && (!causal || s <= t + shift); }
};

Geometry make_geometry(const cpu::AttentionDims& d) {
  return Geometry{
      d.batch,  d.q_len, d.kv_len, d.heads, d.kv_heads, d.head_dim, d.heads / d.kv_heads, d.kv_len - d.q_len,
      d.causal, d.scale};
}

template <typename T>
__device__ __forceinline__ Acc<T> mask_value(const T* mask, const Geometry& g, i64 t, i64 s) {
  return mask != nullptr ? load(mask + t * g.S + s) : Acc<T>(0);
}

template <typename A>
__device__ __forceinline__ A exp_acc(A x) {
  if constexpr (std::is_same_v<A, double>) {
    return exp(x);
  } else {
    return expf(x);
  }
}
template <typename A>
__device__ __forceinline__ A log_acc(A x) {
  if constexpr (std::is_same_v<A, double>) {
    return log(x);
  } else {
    return logf(x);
  }
}
template <typename A>
__device__ __forceinline__ A max_acc(A x, A y) {
  if constexpr (std::is_same_v<A, double>) {
    return fmax(x, y);
  } else {
    return fmaxf(x, y);
  }
}

template <typename A>
__device__ __forceinline__ A negative_infinity() {
  return -static_cast<A>(INFINITY);
}

__device__ __forceinline__ i64 imin(i64 a, i64 b) {
  return a < b ? a : b;
}
__device__ __forceinline__ i64 imax(i64 a, i64 b) {
  return a > b ? a : b;
}

// ======================================================================================================
// Tensor-core path (bf16, f16)
// ======================================================================================================

constexpr int kMmaThreads = 128;  // 4 warps × 16 rows
constexpr int kMmaTile = 64;      // rows of every tile (queries or keys)

template <int Dp>
struct MmaLayout {
  static constexpr int ld = Dp + 8;           // row-major tiles [64][Dp + 8]
  static constexpr int ldt = kMmaTile + 8;    // transposed tiles [Dp][64 + 8]
  static constexpr int rows = kMmaTile * ld;  // elements of a row-major tile
  static constexpr int cols = Dp * ldt;       // elements of a transposed tile
};

// Rows [0, n) of a matrix whose row r starts at src + r·stride (D elements) into dst[r·ld + d] for r < R,
// d < Dp, zero elsewhere. `vec`: D % 8 == 0 and src 16-byte aligned, so every row is read in 16-byte chunks.
template <int R, int Dp, typename T>
__device__ __forceinline__ void copy_rows(const T* __restrict__ src, i64 stride, int n, int D, T* dst, int ld,
                                          bool vec) {
  if (vec) {
    constexpr int kChunks = Dp / 8;
    for (int idx = threadIdx.x; idx < R * kChunks; idx += blockDim.x) {
      const int r = idx / kChunks, d = idx % kChunks * 8;
      uint4 x = make_uint4(0u, 0u, 0u, 0u);
      if (r < n && d < D) x = *reinterpret_cast<const uint4*>(src + r * stride + d);
      *reinterpret_cast<uint4*>(dst + r * ld + d) = x;
    }
  } else {
    const T zero = to_storage<T>(0.0f);
    for (int idx = threadIdx.x; idx < R * Dp; idx += blockDim.x) {
      const int r = idx / Dp, d = idx % Dp;
      dst[r * ld + d] = r < n && d < D ? src[r * stride + d] : zero;
    }
  }
}

// The same rows transposed: dst[d·ldt + r].
template <int R, int Dp, typename T>
__device__ __forceinline__ void copy_rows_transposed(const T* __restrict__ src, i64 stride, int n, int D, T* dst,
                                                     int ldt, bool vec) {
  if (vec) {
    constexpr int kChunks = Dp / 8;
    for (int idx = threadIdx.x; idx < R * kChunks; idx += blockDim.x) {
      const int r = idx / kChunks, d = idx % kChunks * 8;
      uint4 x = make_uint4(0u, 0u, 0u, 0u);
      if (r < n && d < D) x = *reinterpret_cast<const uint4*>(src + r * stride + d);
      T e[8];
      memcpy(e, &x, sizeof(x));
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[(d + i) * ldt + r] = e[i];
    }
  } else {
    const T zero = to_storage<T>(0.0f);
    for (int idx = threadIdx.x; idx < R * Dp; idx += blockDim.x) {
      const int r = idx / Dp, d = idx % Dp;
      dst[d * ldt + r] = r < n && d < D ? src[r * stride + d] : zero;
    }
  }
}

// c (16×8, f32) += a (16×16) · b (16×8), one warp. Fragments (PTX ISA, mma.m16n8k16, g = lane / 4,
// t = lane % 4): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9],
// a[3] = A[g+8][2t+8, 2t+9]; b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g];
// c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1]. A pair's lower index is the low half.
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#else
  __trap();  // built for sm_80 and sm_90 only (CMAKE_CUDA_ARCHITECTURES)
#endif
}

template <typename T>
__device__ __forceinline__ std::uint32_t pair_at(const T* p) {
  return *reinterpret_cast<const std::uint32_t*>(p);
}

// A fragment of rows r0..r0+15, columns k0..k0+15 of a row-major tile.
template <typename T>
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const T* tile, int ld, int r0, int k0, int g, int t) {
  const T* p = tile + (r0 + g) * ld + k0 + 2 * t;
  a[0] = pair_at(p);
  a[1] = pair_at(p + 8 * ld);
  a[2] = pair_at(p + 8);
  a[3] = pair_at(p + 8 * ld + 8);
}

// B fragment (k0..k0+15 × n0..n0+7) of B[k][n] = tile[n·ld + k] (a tile stored n-major, k contiguous).
template <typename T>
__device__ __forceinline__ void load_b(std::uint32_t& b0, std::uint32_t& b1, const T* tile, int ld, int n0, int k0,
                                       int g, int t) {
  const T* p = tile + (n0 + g) * ld + k0 + 2 * t;
  b0 = pair_at(p);
  b1 = pair_at(p + 8);
}

template <typename T>
__device__ __forceinline__ std::uint32_t pack_pair(float lo, float hi) {
  std::uint32_t bits;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&bits, &v, sizeof(bits));
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&bits, &v, sizeof(bits));
  }
  return bits;
}

// The A fragment (16 × 16) made of two accumulator tiles (16 × 8 each, columns 0..7 and 8..15).
template <typename T>
__device__ __forceinline__ void accumulators_to_a(std::uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_pair<T>(c0[0], c0[1]);
  a[1] = pack_pair<T>(c0[2], c0[3]);
  a[2] = pack_pair<T>(c1[0], c1[1]);
  a[3] = pack_pair<T>(c1[2], c1[3]);
}

// Max and sum over the four lanes of a quad (the lanes holding one accumulator row).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Block (b, h, query tile), 4 warps; warp w owns query rows 16w..16w+15 of the tile and this thread rows
// lane/4 and lane/4 + 8 of those. Shared: Q [64][Dp+8], K [64][Dp+8], Vᵀ [Dp][72].
template <typename T, int Dp>
__global__ void __launch_bounds__(kMmaThreads)
    forward_mma_kernel(Geometry g, int q_tiles, const T* __restrict__ q, const T* __restrict__ k,
                       const T* __restrict__ v, const T* __restrict__ mask, T* __restrict__ out,
                       float* __restrict__ lse, bool vec) {
  using L = MmaLayout<Dp>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  T* ks = qs + L::rows;
  T* vt = ks + L::rows;

  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int gr = lane >> 2, tc = lane & 3;
  const i64 block = blockIdx.x;
  const i64 qt = q_tiles - 1 - block % q_tiles;  // the longest causal tiles start first
  const i64 h = block / q_tiles % g.H, b = block / q_tiles / g.H, hk = h / g.group;
  const i64 t0 = qt * kMmaTile;
  const int nq = static_cast<int>(imin(kMmaTile, g.T - t0));
  const int D = static_cast<int>(g.D);
  const float scale = static_cast<float>(g.scale);
  const float neg_inf = negative_infinity<float>();

  copy_rows<kMmaTile, Dp>(q + g.q_row(b, t0, h), g.H * g.D, nq, D, qs, L::ld, vec);

  const i64 t_row[2] = {t0 + warp * 16 + gr, t0 + warp * 16 + gr + 8};
  float o[Dp / 8][4] = {};
  float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.0f, 0.0f};
  const i64 kv_end = g.kv_end(t0, nq);
  for (i64 s0 = 0; s0 < kv_end; s0 += kMmaTile) {
    const int nk = static_cast<int>(imin(kMmaTile, g.S - s0));
    __syncthreads();  // the previous tile's K and V are no longer read
    copy_rows<kMmaTile, Dp>(k + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, ks, L::ld, vec);
    copy_rows_transposed<kMmaTile, Dp>(v + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, vt, L::ldt, vec);
    __syncthreads();

    // S = Q·Kᵀ: 16 rows × 64 keys per warp.
    float sc[8][4] = {};
#pragma unroll
    for (int kc = 0; kc < Dp / 16; ++kc) {
      std::uint32_t a[4];
      load_a(a, qs, L::ld, warp * 16, kc * 16, gr, tc);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        std::uint32_t b0, b1;
        load_b(b0, b1, ks, L::ld, nt * 8, kc * 16, gr, tc);
        mma16816<T>(sc[nt], a, b0, b1);
      }
    }

    // Scale, mask, hide invisible keys; online softmax update of this thread's two rows.
    float tile_max[2] = {neg_inf, neg_inf};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = i >> 1;
        const i64 s = s0 + nt * 8 + 2 * tc + (i & 1);
        float x = neg_inf;
        if (g.visible(t_row[r], s)) x = sc[nt][i] * scale + mask_value(mask, g, t_row[r], s);
        sc[nt][i] = x;
        tile_max[r] = fmaxf(tile_max[r], x);
      }
    }
    float alpha[2], row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m_run[r], quad_max(tile_max[r]));
      // m_new = −inf: nothing visible to this row yet; otherwise exp(−inf) = 0 when m_run was −inf.
      alpha[r] = m_new == neg_inf ? 1.0f : __expf(m_run[r] - m_new);
      m_run[r] = m_new;
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = i >> 1;
        const float p = m_run[r] == neg_inf ? 0.0f : __expf(sc[nt][i] - m_run[r]);
        sc[nt][i] = p;
        row_sum[r] += p;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + quad_sum(row_sum[r]);
#pragma unroll
    for (int nt = 0; nt < Dp / 8; ++nt) {
      o[nt][0] *= alpha[0];
      o[nt][1] *= alpha[0];
      o[nt][2] *= alpha[1];
      o[nt][3] *= alpha[1];
    }

    // O += P·V, P (rounded to T) straight from the score accumulators.
#pragma unroll
    for (int j = 0; j < kMmaTile / 16; ++j) {
      std::uint32_t a[4];
      accumulators_to_a<T>(a, sc[2 * j], sc[2 * j + 1]);
#pragma unroll
      for (int nt = 0; nt < Dp / 8; ++nt) {
        std::uint32_t b0, b1;
        load_b(b0, b1, vt, L::ldt, nt * 8, j * 16, gr, tc);
        mma16816<T>(o[nt], a, b0, b1);
      }
    }
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) inv[r] = l_run[r] > 0.0f ? 1.0f / l_run[r] : 0.0f;
#pragma unroll
  for (int nt = 0; nt < Dp / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = i >> 1, d = nt * 8 + 2 * tc + (i & 1);
      if (t_row[r] < g.T && d < D) out[g.q_row(b, t_row[r], h) + d] = to_storage<T>(o[nt][i] * inv[r]);
    }
  }
  if (tc == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (t_row[r] < g.T) lse[g.stat(b, h, t_row[r])] = l_run[r] > 0.0f ? m_run[r] + logf(l_run[r]) : neg_inf;
    }
  }
}

// Block (b, kv head, key tile), 4 warps; warp w owns keys 16w..16w+15 of the tile and accumulates their
// dK and dV over the group's heads and all query tiles, in order. Per query tile it forms Sᵀ = K·Qᵀ and
// dPᵀ = V·dOᵀ (keys × queries), so Pᵀ and dSᵀ are A fragments of dV += Pᵀ·dO and dK += dSᵀ·Q.
// Shared: K, V, Q, dO [64][Dp+8]; Qᵀ, dOᵀ [Dp][72]; lse and Di [64] f32.
template <typename T, int Dp>
__global__ void __launch_bounds__(kMmaThreads)
    backward_kv_mma_kernel(Geometry g, int k_tiles, const T* __restrict__ q, const T* __restrict__ k,
                           const T* __restrict__ v, const T* __restrict__ mask, const T* __restrict__ dout,
                           const float* __restrict__ lse, const float* __restrict__ di, T* __restrict__ dk,
                           T* __restrict__ dv, bool vec) {
  using L = MmaLayout<Dp>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + L::rows;
  T* qs = vs + L::rows;
  T* dos = qs + L::rows;
  T* qt_s = dos + L::rows;
  T* dot_s = qt_s + L::cols;
  float* lse_s = reinterpret_cast<float*>(dot_s + L::cols);
  float* di_s = lse_s + kMmaTile;

  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int gr = lane >> 2, tc = lane & 3;
  const i64 block = blockIdx.x;
  const i64 kt = block % k_tiles, hk = block / k_tiles % g.Hkv, b = block / k_tiles / g.Hkv;
  const i64 s0 = kt * kMmaTile;
  const int nk = static_cast<int>(imin(kMmaTile, g.S - s0));
  const int D = static_cast<int>(g.D);
  const float scale = static_cast<float>(g.scale);
  const float neg_inf = negative_infinity<float>();

  copy_rows<kMmaTile, Dp>(k + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, ks, L::ld, vec);
  copy_rows<kMmaTile, Dp>(v + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, vs, L::ld, vec);

  const i64 key[2] = {s0 + warp * 16 + gr, s0 + warp * 16 + gr + 8};
  float dk_acc[Dp / 8][4] = {}, dv_acc[Dp / 8][4] = {};
  // Query t sees key s only when t ≥ s − shift: earlier query tiles contribute nothing.
  const i64 t_first = g.causal ? imax(0, s0 - g.shift) : 0;
  for (i64 h = hk * g.group; h < (hk + 1) * g.group; ++h) {
    for (i64 t0 = t_first / kMmaTile * kMmaTile; t0 < g.T; t0 += kMmaTile) {
      const int nq = static_cast<int>(imin(kMmaTile, g.T - t0));
      __syncthreads();  // the previous query tile is no longer read
      const T* q_rows = q + g.q_row(b, t0, h);
      const T* do_rows = dout + g.q_row(b, t0, h);
      copy_rows<kMmaTile, Dp>(q_rows, g.H * g.D, nq, D, qs, L::ld, vec);
      copy_rows<kMmaTile, Dp>(do_rows, g.H * g.D, nq, D, dos, L::ld, vec);
      copy_rows_transposed<kMmaTile, Dp>(q_rows, g.H * g.D, nq, D, qt_s, L::ldt, vec);
      copy_rows_transposed<kMmaTile, Dp>(do_rows, g.H * g.D, nq, D, dot_s, L::ldt, vec);
      for (int r = static_cast<int>(threadIdx.x); r < kMmaTile; r += blockDim.x) {
        lse_s[r] = r < nq ? lse[g.stat(b, h, t0 + r)] : neg_inf;
        di_s[r] = r < nq ? di[g.stat(b, h, t0 + r)] : 0.0f;
      }
      __syncthreads();

      float st[8][4] = {}, dpt[8][4] = {};
#pragma unroll
      for (int kc = 0; kc < Dp / 16; ++kc) {
        std::uint32_t ak[4], av[4];
        load_a(ak, ks, L::ld, warp * 16, kc * 16, gr, tc);
        load_a(av, vs, L::ld, warp * 16, kc * 16, gr, tc);
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          std::uint32_t b0, b1;
          load_b(b0, b1, qs, L::ld, nt * 8, kc * 16, gr, tc);
          mma16816<T>(st[nt], ak, b0, b1);
          load_b(b0, b1, dos, L::ld, nt * 8, kc * 16, gr, tc);
          mma16816<T>(dpt[nt], av, b0, b1);
        }
      }
      // Pᵀ and dSᵀ in place (rows: keys, columns: queries).
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int c = nt * 8 + 2 * tc + (i & 1);
          const i64 s = key[i >> 1], t = t0 + c;
          const float row_lse = lse_s[c];
          float p = 0.0f;
          if (row_lse != neg_inf && g.visible(t, s)) {
            p = __expf(st[nt][i] * scale + mask_value(mask, g, t, s) - row_lse);
          }
          st[nt][i] = p;
          dpt[nt][i] = p * (dpt[nt][i] - di_s[c]);
        }
      }
#pragma unroll
      for (int j = 0; j < kMmaTile / 16; ++j) {
        std::uint32_t ap[4], ads[4];
        accumulators_to_a<T>(ap, st[2 * j], st[2 * j + 1]);
        accumulators_to_a<T>(ads, dpt[2 * j], dpt[2 * j + 1]);
#pragma unroll
        for (int nt = 0; nt < Dp / 8; ++nt) {
          std::uint32_t b0, b1;
          load_b(b0, b1, dot_s, L::ldt, nt * 8, j * 16, gr, tc);
          mma16816<T>(dv_acc[nt], ap, b0, b1);
          load_b(b0, b1, qt_s, L::ldt, nt * 8, j * 16, gr, tc);
          mma16816<T>(dk_acc[nt], ads, b0, b1);
        }
      }
    }
  }

#pragma unroll
  for (int nt = 0; nt < Dp / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const i64 s = key[i >> 1];
      const int d = nt * 8 + 2 * tc + (i & 1);
      if (s < g.S && d < D) {
        dk[g.kv_row(b, s, hk) + d] = to_storage<T>(dk_acc[nt][i] * scale);
        dv[g.kv_row(b, s, hk) + d] = to_storage<T>(dv_acc[nt][i]);
      }
    }
  }
}

// Block (b, h, query tile), 4 warps × 16 query rows; dQ = scale · Σ_key tiles dS·K, in order.
// Shared: Q, dO, K, V [64][Dp+8]; Kᵀ [Dp][72].
template <typename T, int Dp>
__global__ void __launch_bounds__(kMmaThreads)
    backward_q_mma_kernel(Geometry g, int q_tiles, const T* __restrict__ q, const T* __restrict__ k,
                          const T* __restrict__ v, const T* __restrict__ mask, const T* __restrict__ dout,
                          const float* __restrict__ lse, const float* __restrict__ di, T* __restrict__ dq, bool vec) {
  using L = MmaLayout<Dp>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  T* dos = qs + L::rows;
  T* ks = dos + L::rows;
  T* vs = ks + L::rows;
  T* kt_s = vs + L::rows;

  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int gr = lane >> 2, tc = lane & 3;
  const i64 block = blockIdx.x;
  const i64 qt = q_tiles - 1 - block % q_tiles;
  const i64 h = block / q_tiles % g.H, b = block / q_tiles / g.H, hk = h / g.group;
  const i64 t0 = qt * kMmaTile;
  const int nq = static_cast<int>(imin(kMmaTile, g.T - t0));
  const int D = static_cast<int>(g.D);
  const float scale = static_cast<float>(g.scale);
  const float neg_inf = negative_infinity<float>();

  copy_rows<kMmaTile, Dp>(q + g.q_row(b, t0, h), g.H * g.D, nq, D, qs, L::ld, vec);
  copy_rows<kMmaTile, Dp>(dout + g.q_row(b, t0, h), g.H * g.D, nq, D, dos, L::ld, vec);

  const i64 t_row[2] = {t0 + warp * 16 + gr, t0 + warp * 16 + gr + 8};
  float row_lse[2], row_di[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_lse[r] = t_row[r] < g.T ? lse[g.stat(b, h, t_row[r])] : neg_inf;
    row_di[r] = t_row[r] < g.T ? di[g.stat(b, h, t_row[r])] : 0.0f;
  }
  float dq_acc[Dp / 8][4] = {};
  const i64 kv_end = g.kv_end(t0, nq);
  for (i64 s0 = 0; s0 < kv_end; s0 += kMmaTile) {
    const int nk = static_cast<int>(imin(kMmaTile, g.S - s0));
    __syncthreads();
    const T* k_rows = k + g.kv_row(b, s0, hk);
    copy_rows<kMmaTile, Dp>(k_rows, g.Hkv * g.D, nk, D, ks, L::ld, vec);
    copy_rows<kMmaTile, Dp>(v + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, vs, L::ld, vec);
    copy_rows_transposed<kMmaTile, Dp>(k_rows, g.Hkv * g.D, nk, D, kt_s, L::ldt, vec);
    __syncthreads();

    float sc[8][4] = {}, dp[8][4] = {};
#pragma unroll
    for (int kc = 0; kc < Dp / 16; ++kc) {
      std::uint32_t aq[4], ado[4];
      load_a(aq, qs, L::ld, warp * 16, kc * 16, gr, tc);
      load_a(ado, dos, L::ld, warp * 16, kc * 16, gr, tc);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        std::uint32_t b0, b1;
        load_b(b0, b1, ks, L::ld, nt * 8, kc * 16, gr, tc);
        mma16816<T>(sc[nt], aq, b0, b1);
        load_b(b0, b1, vs, L::ld, nt * 8, kc * 16, gr, tc);
        mma16816<T>(dp[nt], ado, b0, b1);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = i >> 1;
        const i64 s = s0 + nt * 8 + 2 * tc + (i & 1);
        float p = 0.0f;
        if (row_lse[r] != neg_inf && g.visible(t_row[r], s)) {
          p = __expf(sc[nt][i] * scale + mask_value(mask, g, t_row[r], s) - row_lse[r]);
        }
        dp[nt][i] = p * (dp[nt][i] - row_di[r]);
      }
    }
#pragma unroll
    for (int j = 0; j < kMmaTile / 16; ++j) {
      std::uint32_t a[4];
      accumulators_to_a<T>(a, dp[2 * j], dp[2 * j + 1]);
#pragma unroll
      for (int nt = 0; nt < Dp / 8; ++nt) {
        std::uint32_t b0, b1;
        load_b(b0, b1, kt_s, L::ldt, nt * 8, j * 16, gr, tc);
        mma16816<T>(dq_acc[nt], a, b0, b1);
      }
    }
  }

#pragma unroll
  for (int nt = 0; nt < Dp / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = i >> 1, d = nt * 8 + 2 * tc + (i & 1);
      if (t_row[r] < g.T && d < D) dq[g.q_row(b, t_row[r], h) + d] = to_storage<T>(dq_acc[nt][i] * scale);
    }
  }
}

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
  for (i64 s0 = 0; s0 < kv_end; s0 += BK) {
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
        ps[r * LDP + c] = g.visible(t, s) ? acc[i][j] + mask_value(mask, g, t, s) : neg_inf;
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
  const i64 t_first = g.causal ? imax(0, s0 - g.shift) : 0;
  for (i64 h = hk * g.group; h < (hk + 1) * g.group; ++h) {
    for (i64 t0 = t_first / BQ * BQ; t0 < g.T; t0 += BQ) {
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
          if (lse_s[qc] != neg_inf && g.visible(t, s)) p = exp_acc(st[i][j] + mask_value(mask, g, t, s) - lse_s[qc]);
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
  for (i64 s0 = 0; s0 < kv_end; s0 += BK) {
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
        if (lse_s[qr] != neg_inf && g.visible(t, s)) p = exp_acc(sc[i][j] + mask_value(mask, g, t, s) - lse_s[qr]);
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

// ======================================================================================================
// Launchers
// ======================================================================================================

template <typename F>
void dispatch_head_dim(i64 D, F&& f) {
  if (D <= 32) {
    f(std::integral_constant<int, 32>{});
  } else if (D <= 64) {
    f(std::integral_constant<int, 64>{});
  } else if (D <= kMaxAttentionHeadDim) {
    f(std::integral_constant<int, 128>{});
  } else {
    throw_error("CUDA attention: head_dim " + std::to_string(D) + " exceeds the kernels' maximum of " +
                std::to_string(kMaxAttentionHeadDim));
  }
}

unsigned grid_for(i64 blocks, const char* kernel) {
  if (blocks > 0x7fffffff) {
    throw_error(std::string("CUDA ") + kernel + ": " + std::to_string(blocks) +
                " thread blocks exceed the grid limit (2^31 - 1)");
  }
  return static_cast<unsigned>(blocks);
}

// Launches kernel<<<blocks, threads, smem>>> on the compute stream, raising its dynamic shared memory limit
// first where it needs more than the default 48 KB.
template <typename... P, typename... Args>
void launch(void (*kernel)(P...), i64 blocks, int threads, std::size_t smem, const char* name, Args... args) {
  if (blocks == 0) return;
  const unsigned grid = grid_for(blocks, name);
  if (smem > 48 * 1024) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), name);
  }
  kernel<<<grid, threads, smem, stream()>>>(args...);
  check_launch(name);
}

i64 ceil_div(i64 x, i64 m) {
  return (x + m - 1) / m;
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

template <int Dp>
constexpr std::size_t mma_smem(int row_tiles, int col_tiles, int floats) {
  return (static_cast<std::size_t>(row_tiles) * MmaLayout<Dp>::rows +
          static_cast<std::size_t>(col_tiles) * MmaLayout<Dp>::cols) *
             2 +
         static_cast<std::size_t>(floats) * sizeof(float);
}

template <typename T>
void forward_mma(const Geometry& g, const T* q, const T* k, const T* v, const T* mask, T* out, float* lse) {
  const bool vec = g.D % 8 == 0 && aligned16(q) && aligned16(k) && aligned16(v);
  const i64 q_tiles = ceil_div(g.T, kMmaTile);
  dispatch_head_dim(g.D, [&](auto dp) {
    constexpr int Dp = decltype(dp)::value;
    launch(forward_mma_kernel<T, Dp>, q_tiles * g.H * g.B, kMmaThreads, mma_smem<Dp>(2, 1, 0), "attention", g,
           static_cast<int>(q_tiles), q, k, v, mask, out, lse, vec);
  });
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

template <typename T>
void backward_mma(const Geometry& g, const T* q, const T* k, const T* v, const T* mask, const T* dout, const float* lse,
                  const float* di, T* dq, T* dk, T* dv) {
  const bool vec = g.D % 8 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(dout);
  const i64 q_tiles = ceil_div(g.T, kMmaTile), k_tiles = ceil_div(g.S, kMmaTile);
  dispatch_head_dim(g.D, [&](auto dp) {
    constexpr int Dp = decltype(dp)::value;
    launch(backward_kv_mma_kernel<T, Dp>, k_tiles * g.Hkv * g.B, kMmaThreads, mma_smem<Dp>(4, 2, 2 * kMmaTile),
           "attention_backward (dk, dv)", g, static_cast<int>(k_tiles), q, k, v, mask, dout, lse, di, dk, dv, vec);
    launch(backward_q_mma_kernel<T, Dp>, q_tiles * g.H * g.B, kMmaThreads, mma_smem<Dp>(4, 1, 0),
           "attention_backward (dq)", g, static_cast<int>(q_tiles), q, k, v, mask, dout, lse, di, dq, vec);
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
                              const void* mask, void* out, void* lse) {
  const Geometry g = make_geometry(dims);
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
                               const void* mask, const void* out, const void* lse, const void* dout, void* dq, void* dk,
                               void* dv, void* di) {
  const Geometry g = make_geometry(dims);
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
