// Flash attention on tensor cores: bf16 and f16 (the algorithm and its design: docs/gpu.md, "Attention";
// attention.cu has the f32/f64 kernels and the launchers, attention.h the launch shapes).
//
// mma.sync m16n8k16 with f32 accumulators: a block of 4 warps owns a 64-row tile, each warp 16 rows; the
// other operand streams through shared memory in 64-row tiles, two buffers filled by cp.async so that the
// next tile's copy overlaps this tile's products. An accumulator fragment of one product (S, P, dS) is,
// element for element, the A fragment of the next, so P and dS never leave registers. Fragments come from
// the row-major tiles ([row][d]) by ldmatrix, transposed by ldmatrix itself where the tile's row is the
// product's k index. Rows are padded by 8 elements so that every 8-lane phase of an ldmatrix hits 32
// different banks. Dropout on the probabilities multiplies each P (and dZ in the backward) held in
// registers by its keep factor (Geometry::keep), drawn per element where it is used, never stored.
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
  static constexpr int rows = kMmaTile * ld;  // elements of a tile
};

// Rows [0, n) of a matrix whose row r starts at src + r·stride (D elements) into dst[r·ld + d] for r < R,
// d < Dp, zero elsewhere, element by element (the path for a head_dim that is not a multiple of 8 or an
// operand that is not 16-byte aligned; load_tile's cp.async path is the other).
template <int R, int Dp, typename T>
__device__ __forceinline__ void copy_rows(const T* __restrict__ src, i64 stride, int n, int D, T* dst, int ld) {
  const T zero = to_storage<T>(0.0f);
  for (int idx = threadIdx.x; idx < R * Dp; idx += blockDim.x) {
    const int r = idx / Dp, d = idx % Dp;
    dst[r * ld + d] = r < n && d < D ? src[r * stride + d] : zero;
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

// Softmax runs in base 2: scores are scaled by scale·log2(e), the log-sum-exp is stored in base e.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8×8 b16 matrices from shared memory; lane l gives the address of row l % 8 of matrix l / 8. Without
// .trans lane l receives elements [l/4][2(l%4)], [l/4][2(l%4)+1] of each; with .trans [2(l%4)][l/4] and
// [2(l%4)+1][l/4].
template <bool kTrans>
__device__ __forceinline__ void ldsm4(std::uint32_t (&r)[4], const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p))
                 : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p))
                 : "memory");
  }
#else
  __trap();
#endif
}

// The A fragment of rows r0..r0+15, columns k0..k0+15 of a row-major tile (matrices: rows +0/+8 × columns
// +0/+8, in a[] order).
template <typename T>
__device__ __forceinline__ void ldsm_a(std::uint32_t (&a)[4], const T* tile, int ld, int r0, int k0, int lane) {
  ldsm4<false>(a, tile + (r0 + (lane & 15)) * ld + k0 + (lane >> 4) * 8);
}

// B fragments of two neighbouring n-tiles (n0..n0+7 in r[0], r[1]; n0+8..n0+15 in r[2], r[3]) for k0..k0+15,
// where B[k][n] = tile[n·ld + k] (K for S = Q·Kᵀ: keys are n, head dims k).
template <typename T>
__device__ __forceinline__ void ldsm_b(std::uint32_t (&r)[4], const T* tile, int ld, int n0, int k0, int lane) {
  ldsm4<false>(r, tile + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + k0 + ((lane >> 3) & 1) * 8);
}

// The same where B[k][n] = tile[k·ld + n] (V for O = P·V: keys are k, head dims n), transposed by ldmatrix.
template <typename T>
__device__ __forceinline__ void ldsm_bt(std::uint32_t (&r)[4], const T* tile, int ld, int n0, int k0, int lane) {
  ldsm4<true>(r, tile + (k0 + (lane & 15)) * ld + n0 + (lane >> 4) * 8);
}

// dst ← 16 bytes of src, asynchronously; zeros (nothing read) when !fill.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool fill) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(fill ? 16 : 0)
               : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

// A 64-row tile: rows [0, n) of the matrix at src (row stride `stride`, D elements) into dst[r·ld + d],
// zeros elsewhere. By cp.async when `vec` (D % 8 == 0, operands 16-byte aligned; complete after
// cp_async_wait_all and a barrier), else by plain stores (complete after a barrier).
template <int Dp, typename T>
__device__ __forceinline__ void load_tile(const T* __restrict__ src, i64 stride, int n, int D, T* dst, bool vec) {
  constexpr int ld = MmaLayout<Dp>::ld, kChunks = Dp / 8;
  if (vec) {
    for (int idx = threadIdx.x; idx < kMmaTile * kChunks; idx += kMmaThreads) {
      const int r = idx / kChunks, d = idx % kChunks * 8;
      const bool in = r < n && d < D;
      cp_async16(dst + r * ld + d, in ? src + r * stride + d : src, in);
    }
  } else {
    copy_rows<kMmaTile, Dp>(src, stride, n, D, dst, ld);
  }
}

// Every query of [t0, t0 + 64) sees every key of [s0, s0 + 64): both tiles whole, no additive,
// key-padding or document mask, and under the causal rule the tile's last key visible to its first query and, with a
// window, its first key to its last query. Such a tile needs no per-element test.
__device__ __forceinline__ bool whole_tile(const Geometry& g, bool has_mask, i64 t0, i64 s0) {
  if (has_mask || g.key_mask != nullptr || g.doc_starts != nullptr || t0 + kMmaTile > g.T || s0 + kMmaTile > g.S) {
    return false;
  }
  if (!g.causal) return true;
  return s0 + kMmaTile - 1 <= t0 + g.shift && (g.window <= 0 || s0 > t0 + kMmaTile - 1 + g.shift - g.window);
}

// K and V rows [s0, s0 + 64) of kv head hk (fewer at the end) into the tiles ks and vs (load_tile).
template <int Dp, typename T>
__device__ __forceinline__ void load_kv_tiles(const Geometry& g, const T* __restrict__ k, const T* __restrict__ v,
                                              i64 b, i64 hk, i64 s0, T* ks, T* vs, bool vec) {
  const int nk = static_cast<int>(imin(kMmaTile, g.S - s0));
  load_tile<Dp>(k + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, static_cast<int>(g.D), ks, vec);
  load_tile<Dp>(v + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, static_cast<int>(g.D), vs, vec);
}

// Two products of a backward kernel over one 16-wide k step at k0, for the N pairs of n-tiles:
// acc1[2n], acc1[2n + 1] += a1 · B1 and acc2[2n], acc2[2n + 1] += a2 · B2, the B fragments by ldsm_b
// (B[k][n] = tile[n·ld + k]) or, with kTrans, by ldsm_bt (B[k][n] = tile[k·ld + n]).
template <typename T, bool kTrans, int N>
__device__ __forceinline__ void mma_pairs2(float (&acc1)[2 * N][4], float (&acc2)[2 * N][4],
                                           const std::uint32_t (&a1)[4], const std::uint32_t (&a2)[4], const T* b1,
                                           const T* b2, int ld, int k0, int lane) {
  const auto load_b = [&](std::uint32_t(&r)[4], const T* tile, int n0) {
    if constexpr (kTrans) {
      ldsm_bt(r, tile, ld, n0, k0, lane);
    } else {
      ldsm_b(r, tile, ld, n0, k0, lane);
    }
  };
#pragma unroll
  for (int np = 0; np < N; ++np) {
    std::uint32_t bf1[4], bf2[4];
    load_b(bf1, b1, np * 16);
    mma16816<T>(acc1[2 * np], a1, bf1[0], bf1[1]);
    mma16816<T>(acc1[2 * np + 1], a1, bf1[2], bf1[3]);
    load_b(bf2, b2, np * 16);
    mma16816<T>(acc2[2 * np], a2, bf2[0], bf2[1]);
    mma16816<T>(acc2[2 * np + 1], a2, bf2[2], bf2[3]);
  }
}

// acc (one warp's 16 rows × Dp) += X · tile, where X (16 × 64) is held as accumulators x (the S, P or dS
// of this warp, so its A fragments come from registers) and tile is a [64][Dp] row-major tile whose rows
// are the k index (V in O += P·V, K in dQ += dS·K), read transposed by ldmatrix.
template <typename T, int Dp>
__device__ __forceinline__ void accumulate_by_tile(float (&acc)[Dp / 8][4], const float (&x)[8][4], const T* tile,
                                                   int lane) {
#pragma unroll
  for (int j = 0; j < kMmaTile / 16; ++j) {
    std::uint32_t a[4];
    accumulators_to_a<T>(a, x[2 * j], x[2 * j + 1]);
#pragma unroll
    for (int np = 0; np < Dp / 16; ++np) {
      std::uint32_t b[4];
      ldsm_bt(b, tile, MmaLayout<Dp>::ld, np * 16, j * 16, lane);
      mma16816<T>(acc[2 * np], a, b[0], b[1]);
      mma16816<T>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// The two score products of a backward kernel, one warp's 16 rows × the 64 columns of the tile:
// acc1 = A1·B1ᵀ and acc2 = A2·B2ᵀ over the head dims (rows of A1, A2 and B1, B2 are [row][d] tiles).
template <typename T, int Dp>
__device__ __forceinline__ void score_products2(const T* a1, const T* a2, const T* b1, const T* b2, int warp, int lane,
                                                float (&acc1)[8][4], float (&acc2)[8][4]) {
  using L = MmaLayout<Dp>;
#pragma unroll
  for (int kc = 0; kc < Dp / 16; ++kc) {
    std::uint32_t af1[4], af2[4];
    ldsm_a(af1, a1, L::ld, warp * 16, kc * 16, lane);
    ldsm_a(af2, a2, L::ld, warp * 16, kc * 16, lane);
    mma_pairs2<T, false, 4>(acc1, acc2, af1, af2, b1, b2, L::ld, kc * 16, lane);
  }
}

// P recomputed in base 2 for query t and key s from the score (scale2 = scale·log2 e) and the row's lse
// (already in base 2): no test on a whole tile, else 0 where t does not see s or its row has no visible key.
template <typename T>
__device__ __forceinline__ float recomputed_probability(bool whole, const Geometry& g, const T* __restrict__ mask,
                                                        i64 b, i64 t, i64 s, float score, float scale2, float row_lse) {
  float p = 0.0f;
  if (whole) {
    p = exp2f(score * scale2 - row_lse);
  } else if (row_lse != negative_infinity<float>() && g.sees(b, t, s)) {
    p = exp2f(score * scale2 + mask_value(mask, g, t, s) * kLog2e - row_lse);
  }
  return p;
}

// Where a thread of a query-tile block (the forward and dQ kernels) stands: the tile, the two query rows
// it holds (warp w owns rows 16w..16w+15 of the tile, the thread rows lane/4 and lane/4 + 8 of those) and
// [first, kv_end), the 64-key tiles that any row of the tile sees.
struct MmaQueryRows {
  int warp, lane, tc;
  i64 b, h, hk, t0;
  int nq, D;
  float scale2;  // scale·log2(e): scores in base 2
  i64 first, kv_end;
  i64 t_row[2];
};
__device__ __forceinline__ MmaQueryRows mma_query_rows(const Geometry& g, int q_tiles) {
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const auto [b, h, hk, t0, nq] = query_tile(g, q_tiles, kMmaTile);
  const i64 row = t0 + warp * 16 + (lane >> 2);
  return MmaQueryRows{warp,
                      lane,
                      lane & 3,
                      b,
                      h,
                      hk,
                      t0,
                      nq,
                      static_cast<int>(g.D),
                      static_cast<float>(g.scale) * kLog2e,
                      g.kv_begin(b, t0) / kMmaTile * kMmaTile,
                      g.kv_end(t0, nq),
                      {row, row + 8}};
}

// One step of a loop over the key tiles [.., kv_end) double-buffered in ks and vs: waits for the tile at s0
// (in buffer buf), then, every warp being done with the other buffer, starts the next tile's copy into it.
// Returns the tile's K and V.
template <typename T>
struct KvTile {
  const T* k;
  const T* v;
};
template <int Dp, typename T>
__device__ __forceinline__ KvTile<T> next_kv_tile(const Geometry& g, const T* __restrict__ k, const T* __restrict__ v,
                                                  i64 b, i64 hk, i64 s0, i64 kv_end, T* ks, T* vs, int buf, bool vec) {
  using L = MmaLayout<Dp>;
  cp_async_wait_all();
  __syncthreads();
  if (s0 + kMmaTile < kv_end) {
    load_kv_tiles<Dp>(g, k, v, b, hk, s0 + kMmaTile, ks + (buf ^ 1) * L::rows, vs + (buf ^ 1) * L::rows, vec);
  }
  cp_async_commit();
  return {ks + buf * L::rows, vs + buf * L::rows};
}

// The elements of a warp's 16 × Dp accumulator block that this thread holds: acc[nt][i] is in row r = i / 2
// of the thread's two, column d = nt·8 + 2·(lane % 4) + i % 2; f(r, d, value) for each one with d < D.
template <int Dp, typename F>
__device__ __forceinline__ void for_each_held(const float (&acc)[Dp / 8][4], int tc, int D, F&& f) {
#pragma unroll
  for (int nt = 0; nt < Dp / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int d = nt * 8 + 2 * tc + (i & 1);
      if (d < D) f(i >> 1, d, acc[nt][i]);
    }
  }
}

// Block (b, h, query tile), 4 warps; warp w owns query rows 16w..16w+15 of the tile and this thread rows
// lane/4 and lane/4 + 8 of those. Shared: Q [64][Dp+8], K and V
// [2][64][Dp+8]. The warp's Q fragments stay in registers.
template <typename T, int Dp>
__global__ void __launch_bounds__(kMmaThreads)
    flash_forward_kernel(Geometry g, int q_tiles, const T* __restrict__ q, const T* __restrict__ k,
                         const T* __restrict__ v, const T* __restrict__ mask, T* __restrict__ out,
                         float* __restrict__ lse, bool vec) {
  using L = MmaLayout<Dp>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  T* ks = qs + L::rows;
  T* vs = ks + 2 * L::rows;

  const MmaQueryRows at = mma_query_rows(g, q_tiles);  // named: C++17 lambdas cannot capture the bindings
  const auto& [warp, lane, tc, b, h, hk, t0, nq, D, scale2, first, kv_end, t_row] = at;
  const float neg_inf = negative_infinity<float>();
  const bool has_mask = mask != nullptr;

  load_tile<Dp>(q + g.q_row(b, t0, h), g.H * g.D, nq, D, qs, vec);
  if (first < kv_end) load_kv_tiles<Dp>(g, k, v, b, hk, first, ks, vs, vec);
  cp_async_commit();

  std::uint32_t qf[Dp / 16][4];
  float o[Dp / 8][4] = {};
  float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.0f, 0.0f};  // m in base 2: max of scale·log2(e)·s
  int buf = 0;
  for (i64 s0 = first; s0 < kv_end; s0 += kMmaTile, buf ^= 1) {
    const auto [kb, vb] = next_kv_tile<Dp>(g, k, v, b, hk, s0, kv_end, ks, vs, buf, vec);
    if (s0 == first) {
#pragma unroll
      for (int kc = 0; kc < Dp / 16; ++kc) ldsm_a(qf[kc], qs, L::ld, warp * 16, kc * 16, lane);
    }

    // S = Q·Kᵀ: 16 rows × 64 keys per warp.
    float sc[8][4] = {};
#pragma unroll
    for (int kc = 0; kc < Dp / 16; ++kc) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        std::uint32_t bb[4];
        ldsm_b(bb, kb, L::ld, np * 16, kc * 16, lane);
        mma16816<T>(sc[2 * np], qf[kc], bb[0], bb[1]);
        mma16816<T>(sc[2 * np + 1], qf[kc], bb[2], bb[3]);
      }
    }

    float tile_max[2] = {neg_inf, neg_inf};
    if (whole_tile(g, has_mask, t0, s0)) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          sc[nt][i] *= scale2;
          tile_max[i >> 1] = fmaxf(tile_max[i >> 1], sc[nt][i]);
        }
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = i >> 1;
          const i64 s = s0 + nt * 8 + 2 * tc + (i & 1);
          float x = neg_inf;
          if (g.sees(b, t_row[r], s)) x = sc[nt][i] * scale2 + mask_value(mask, g, t_row[r], s) * kLog2e;
          sc[nt][i] = x;
          tile_max[r] = fmaxf(tile_max[r], x);
        }
      }
    }
    float alpha[2], row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m_run[r], quad_max(tile_max[r]));
      alpha[r] = m_new == neg_inf ? 1.0f : exp2f(m_run[r] - m_new);
      m_run[r] = m_new;
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = i >> 1;
        const float p = m_run[r] == neg_inf ? 0.0f : exp2f(sc[nt][i] - m_run[r]);
        row_sum[r] += p;
        // With dropout, P·V takes p times its keep factor; the sum (lse) stays P's.
        sc[nt][i] = g.dropout && p != 0.0f ? p * g.keep<float>(b, h, t_row[r], s0 + nt * 8 + 2 * tc + (i & 1)) : p;
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

    accumulate_by_tile<T, Dp>(o, sc, vb, lane);  // O += P·V
  }
  cp_async_wait_all();  // nothing in flight at exit (no tile: the Q copy)

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) inv[r] = l_run[r] > 0.0f ? 1.0f / l_run[r] : 0.0f;
  for_each_held<Dp>(o, tc, D, [&](int r, int d, float x) {
    if (at.t_row[r] < g.T) out[g.q_row(at.b, at.t_row[r], at.h) + d] = to_storage<T>(x * inv[r]);
  });
  if (tc == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (t_row[r] < g.T) lse[g.stat(b, h, t_row[r])] = l_run[r] > 0.0f ? m_run[r] * kLn2 + logf(l_run[r]) : neg_inf;
    }
  }
}

// Block (b, kv head, key tile), 4 warps; warp w owns keys 16w..16w+15 of the tile and accumulates their
// dK and dV over the group's heads and their query tiles, in order. Per query tile it forms Sᵀ = K·Qᵀ and
// dPᵀ = V·dOᵀ (keys × queries), so Pᵀ and dSᵀ are A fragments of dV += Pᵀ·dO and dK += dSᵀ·Q. Shared: K, V [64][Dp+8];
// Q, dO [2][64][Dp+8]; lse·log2(e) and Di [2][64] f32.
template <typename T, int Dp>
__global__ void __launch_bounds__(kMmaThreads)
    flash_backward_kv_kernel(Geometry g, int k_tiles, const T* __restrict__ q, const T* __restrict__ k,
                             const T* __restrict__ v, const T* __restrict__ mask, const T* __restrict__ dout,
                             const float* __restrict__ lse, const float* __restrict__ di, T* __restrict__ dk,
                             T* __restrict__ dv, bool vec) {
  using L = MmaLayout<Dp>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + L::rows;
  T* qs = vs + L::rows;
  T* dos = qs + 2 * L::rows;
  float* lse_s = reinterpret_cast<float*>(dos + 2 * L::rows);
  float* di_s = lse_s + 2 * kMmaTile;

  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int tc = lane & 3;
  const i64 block = blockIdx.x;
  const i64 kt = block % k_tiles, hk = block / k_tiles % g.Hkv, b = block / k_tiles / g.Hkv;
  const i64 s0 = kt * kMmaTile;
  const int nk = static_cast<int>(imin(kMmaTile, g.S - s0));
  const int D = static_cast<int>(g.D);
  const float scale2 = static_cast<float>(g.scale) * kLog2e;
  const float neg_inf = negative_infinity<float>();
  const bool has_mask = mask != nullptr;
  const i64 q_stride = g.H * g.D;

  load_tile<Dp>(k + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, ks, vec);
  load_tile<Dp>(v + g.kv_row(b, s0, hk), g.Hkv * g.D, nk, D, vs, vec);

  // Iteration it: head hk·group + it / n_t, query tile tq0 + it % n_t (the tiles outside [t_first, t_end)
  // see no key of this tile).
  const i64 q_first = g.q_begin(s0), q_end = g.q_end(s0, nk);
  const i64 tq0 = q_first / kMmaTile, n_t = q_first < q_end ? imax(ceil_div(q_end, kMmaTile) - tq0, 0) : 0;
  const i64 n_iter = g.group * n_t;
  const auto issue = [&](i64 it, int to) {
    const i64 h = hk * g.group + it / n_t, t0 = (tq0 + it % n_t) * kMmaTile;
    const int nq = static_cast<int>(imin(kMmaTile, g.T - t0));
    load_tile<Dp>(q + g.q_row(b, t0, h), q_stride, nq, D, qs + to * L::rows, vec);
    load_tile<Dp>(dout + g.q_row(b, t0, h), q_stride, nq, D, dos + to * L::rows, vec);
    for (int r = static_cast<int>(threadIdx.x); r < kMmaTile; r += kMmaThreads) {
      lse_s[to * kMmaTile + r] = r < nq ? lse[g.stat(b, h, t0 + r)] * kLog2e : neg_inf;
      di_s[to * kMmaTile + r] = r < nq ? di[g.stat(b, h, t0 + r)] : 0.0f;
    }
  };
  if (n_iter > 0) issue(0, 0);
  cp_async_commit();

  const i64 key[2] = {s0 + warp * 16 + (lane >> 2), s0 + warp * 16 + (lane >> 2) + 8};
  float dk_acc[Dp / 8][4] = {}, dv_acc[Dp / 8][4] = {};
  int buf = 0;
  for (i64 it = 0; it < n_iter; ++it, buf ^= 1) {
    cp_async_wait_all();
    __syncthreads();
    if (it + 1 < n_iter) issue(it + 1, buf ^ 1);
    cp_async_commit();
    const i64 t0 = (tq0 + it % n_t) * kMmaTile, h = hk * g.group + it / n_t;
    const T* qb = qs + buf * L::rows;
    const T* dob = dos + buf * L::rows;
    const float* lse_b = lse_s + buf * kMmaTile;
    const float* di_b = di_s + buf * kMmaTile;

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: 16 keys × 64 queries per warp.
    float st[8][4] = {}, dpt[8][4] = {};
    score_products2<T, Dp>(ks, vs, qb, dob, warp, lane, st, dpt);
    // Pᵀ and dSᵀ in place (rows: keys, columns: queries).
    const bool whole = whole_tile(g, has_mask, t0, s0);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = nt * 8 + 2 * tc + (i & 1);
        const float p = recomputed_probability(whole, g, mask, b, t0 + c, key[i >> 1], st[nt][i], scale2, lse_b[c]);
        // With dropout: Zᵀ = Pᵀ ∘ keep multiplies dO into dV, and dP = keep ∘ dZ.
        const float keep = g.dropout && p != 0.0f ? g.keep<float>(b, h, t0 + c, key[i >> 1]) : 1.0f;
        st[nt][i] = p * keep;
        dpt[nt][i] = p * (dpt[nt][i] * keep - di_b[c]);
      }
    }
    // dV += Pᵀ·dO, dK += dSᵀ·Q (dO and Q read transposed: queries are the k index).
#pragma unroll
    for (int j = 0; j < kMmaTile / 16; ++j) {
      std::uint32_t ap[4], ads[4];
      accumulators_to_a<T>(ap, st[2 * j], st[2 * j + 1]);
      accumulators_to_a<T>(ads, dpt[2 * j], dpt[2 * j + 1]);
      mma_pairs2<T, true, Dp / 16>(dv_acc, dk_acc, ap, ads, dob, qb, L::ld, j * 16, lane);
    }
  }
  cp_async_wait_all();

  for_each_held<Dp>(dk_acc, tc, D, [&](int r, int d, float x) {
    if (key[r] < g.S) dk[g.kv_row(b, key[r], hk) + d] = to_storage<T>(x * static_cast<float>(g.scale));
  });
  for_each_held<Dp>(dv_acc, tc, D, [&](int r, int d, float x) {
    if (key[r] < g.S) dv[g.kv_row(b, key[r], hk) + d] = to_storage<T>(x);
  });
}

// Block (b, h, query tile), 4 warps × 16 query rows; dQ = scale · Σ_key tiles dS·K, in order. Shared: Q, dO [64][Dp+8];
// K, V [2][64][Dp+8].
template <typename T, int Dp>
__global__ void __launch_bounds__(kMmaThreads)
    flash_backward_q_kernel(Geometry g, int q_tiles, const T* __restrict__ q, const T* __restrict__ k,
                            const T* __restrict__ v, const T* __restrict__ mask, const T* __restrict__ dout,
                            const float* __restrict__ lse, const float* __restrict__ di, T* __restrict__ dq, bool vec) {
  using L = MmaLayout<Dp>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  T* dos = qs + L::rows;
  T* ks = dos + L::rows;
  T* vs = ks + 2 * L::rows;

  const MmaQueryRows at = mma_query_rows(g, q_tiles);  // named: C++17 lambdas cannot capture the bindings
  const auto& [warp, lane, tc, b, h, hk, t0, nq, D, scale2, first, kv_end, t_row] = at;
  const bool has_mask = mask != nullptr;

  load_tile<Dp>(q + g.q_row(b, t0, h), g.H * g.D, nq, D, qs, vec);
  load_tile<Dp>(dout + g.q_row(b, t0, h), g.H * g.D, nq, D, dos, vec);
  if (first < kv_end) load_kv_tiles<Dp>(g, k, v, b, hk, first, ks, vs, vec);
  cp_async_commit();

  const float neg_inf = negative_infinity<float>();
  float row_lse[2], row_di[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_lse[r] = t_row[r] < g.T ? lse[g.stat(b, h, t_row[r])] * kLog2e : neg_inf;
    row_di[r] = t_row[r] < g.T ? di[g.stat(b, h, t_row[r])] : 0.0f;
  }
  float dq_acc[Dp / 8][4] = {};
  int buf = 0;
  for (i64 s0 = first; s0 < kv_end; s0 += kMmaTile, buf ^= 1) {
    const auto [kb, vb] = next_kv_tile<Dp>(g, k, v, b, hk, s0, kv_end, ks, vs, buf, vec);

    // S = Q·Kᵀ and dP = dO·Vᵀ: 16 rows × 64 keys per warp.
    float sc[8][4] = {}, dp[8][4] = {};
    score_products2<T, Dp>(qs, dos, kb, vb, warp, lane, sc, dp);
    const bool whole = whole_tile(g, has_mask, t0, s0);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = i >> 1;
        const i64 s = s0 + nt * 8 + 2 * tc + (i & 1);
        const float p = recomputed_probability(whole, g, mask, b, t_row[r], s, sc[nt][i], scale2, row_lse[r]);
        const float keep = g.dropout && p != 0.0f ? g.keep<float>(b, h, t_row[r], s) : 1.0f;  // dP = keep ∘ dZ
        dp[nt][i] = p * (dp[nt][i] * keep - row_di[r]);
      }
    }
    accumulate_by_tile<T, Dp>(dq_acc, dp, kb, lane);  // dQ += dS·K
  }
  cp_async_wait_all();

  for_each_held<Dp>(dq_acc, tc, D, [&](int r, int d, float x) {
    if (at.t_row[r] < g.T) dq[g.q_row(at.b, at.t_row[r], at.h) + d] = to_storage<T>(x * static_cast<float>(g.scale));
  });
}

// Shared memory of a kernel: `tiles` row-major tiles and `floats` f32 values.
template <int Dp>
constexpr std::size_t mma_smem(int tiles, int floats) {
  return static_cast<std::size_t>(tiles) * MmaLayout<Dp>::rows * 2 + static_cast<std::size_t>(floats) * sizeof(float);
}

}  // namespace

template <typename T>
void forward_mma(const Geometry& g, const T* q, const T* k, const T* v, const T* mask, T* out, float* lse) {
  const bool vec = g.D % 8 == 0 && aligned16(q) && aligned16(k) && aligned16(v);
  const i64 q_tiles = ceil_div(g.T, kMmaTile);
  dispatch_head_dim(g.D, [&](auto dp) {
    constexpr int Dp = decltype(dp)::value;
    launch(flash_forward_kernel<T, Dp>, q_tiles * g.H * g.B, kMmaThreads, mma_smem<Dp>(5, 0), "attention", g,
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
    launch(flash_backward_kv_kernel<T, Dp>, k_tiles * g.Hkv * g.B, kMmaThreads, mma_smem<Dp>(6, 4 * kMmaTile),
           "attention_backward (dk, dv)", g, static_cast<int>(k_tiles), q, k, v, mask, dout, lse, di, dk, dv, vec);
    launch(flash_backward_q_kernel<T, Dp>, q_tiles * g.H * g.B, kMmaThreads, mma_smem<Dp>(6, 0),
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
