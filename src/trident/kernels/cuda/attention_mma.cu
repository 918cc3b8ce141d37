// Flash attention on tensor cores: bf16 and f16 (see attention.cu for the algorithm, attention.h for the
// launch shapes).
//
// mma.sync m16n8k16 with f32 accumulators: a block of 4 warps owns a 64-row tile, each warp 16 rows; the
// other operand streams through shared memory in 64-row tiles. An accumulator fragment of one product (S,
// P, dS) is, element for element, the A fragment of the next, so P and dS never leave registers. Every B
// operand is read from shared memory as pairs along its k dimension: K, V, Q, dO tiles row-major
// ([row][d]) where d is k, transposed copies ([d][row]) where the key or query index is k. Rows are padded
// by 8 elements so that the 32 lanes of a fragment load hit 32 different banks.
#include <cstring>

#include "trident/kernels/cuda/attention_common.cuh"

namespace trident::kernels::cuda::attention_detail {

namespace {

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

// The same rows transposed: dst[d·ldt + r]. In the 16-byte path the row index runs fastest across the lanes:
// the bank of dst[d·ldt + r] is (4d + r/2) mod 32 for ldt = 72, the same for every chunk d = 8c + i, so lanes
// that shared r and differed in the chunk would make each element store a 16-way bank conflict.
template <int R, int Dp, typename T>
__device__ __forceinline__ void copy_rows_transposed(const T* __restrict__ src, i64 stride, int n, int D, T* dst,
                                                     int ldt, bool vec) {
  if (vec) {
    constexpr int kChunks = Dp / 8;
    for (int idx = threadIdx.x; idx < R * kChunks; idx += blockDim.x) {
      const int r = idx % R, d = idx / R * 8;
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
  for (i64 s0 = g.kv_begin(t0) / kMmaTile * kMmaTile; s0 < kv_end; s0 += kMmaTile) {
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
        if (g.sees(b, t_row[r], s)) x = sc[nt][i] * scale + mask_value(mask, g, t_row[r], s);
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
  // Query t sees key s only when t ≥ s − shift and, with a window, t < s − shift + window: the query tiles
  // outside [t_first, t_end) contribute nothing.
  const i64 t_first = g.q_begin(s0), t_end = g.q_end(s0, nk);
  for (i64 h = hk * g.group; h < (hk + 1) * g.group; ++h) {
    for (i64 t0 = t_first / kMmaTile * kMmaTile; t0 < t_end; t0 += kMmaTile) {
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
          if (row_lse != neg_inf && g.sees(b, t, s)) {
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
  for (i64 s0 = g.kv_begin(t0) / kMmaTile * kMmaTile; s0 < kv_end; s0 += kMmaTile) {
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
        if (row_lse[r] != neg_inf && g.sees(b, t_row[r], s)) {
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

template <int Dp>
constexpr std::size_t mma_smem(int row_tiles, int col_tiles, int floats) {
  return (static_cast<std::size_t>(row_tiles) * MmaLayout<Dp>::rows +
          static_cast<std::size_t>(col_tiles) * MmaLayout<Dp>::cols) *
             2 +
         static_cast<std::size_t>(floats) * sizeof(float);
}

}  // namespace

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

template void forward_mma<__nv_bfloat16>(const Geometry&, const __nv_bfloat16*, const __nv_bfloat16*,
                                         const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, float*);
template void forward_mma<__half>(const Geometry&, const __half*, const __half*, const __half*, const __half*, __half*,
                                  float*);
template void backward_mma<__nv_bfloat16>(const Geometry&, const __nv_bfloat16*, const __nv_bfloat16*,
                                          const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                                          const float*, const float*, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*);
template void backward_mma<__half>(const Geometry&, const __half*, const __half*, const __half*, const __half*,
                                   const __half*, const float*, const float*, __half*, __half*, __half*);

}  // namespace trident::kernels::cuda::attention_detail
