// The tile products of the CPU attention kernels (attention.cpp, attention_sparse.cpp): C[M×N] (+)= A·B with A
// read through row and column strides (so Pᵀ·dO needs no transpose), in strips of 64, 32 or 16 columns;
// f32 strips of 64 on AVX-512 as register blocks of 6 rows × 64 columns. Internal to kernels/cpu.
#pragma once

#include <type_traits>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "trident/kernels/cpu/attention_tiles.h"

namespace trident::kernels::cpu::attention_detail {

// ---------------------------------------------------------------------------
// Tile product: C[m][n] (+)= Σ_{k<K} a[m·a_rs + k·a_ks] · b[k·ldb + n] for
// m < M (a multiple of kRows) and n < W.
template <typename A, i64 W, bool kAccumulate>
inline void gemm_strip(i64 M, i64 K, const A* a, i64 a_rs, i64 a_ks, const A* b, i64 ldb, A* c, i64 ldc) {
  for (i64 m = 0; m < M; m += kRows) {
    A acc[kRows][W];
    for (i64 r = 0; r < kRows; ++r)
      for (i64 n = 0; n < W; ++n) acc[r][n] = kAccumulate ? c[(m + r) * ldc + n] : A(0);
    for (i64 k = 0; k < K; ++k) {
      const A* bk = b + k * ldb;
      for (i64 r = 0; r < kRows; ++r) {
        const A av = a[(m + r) * a_rs + k * a_ks];
        for (i64 n = 0; n < W; ++n) acc[r][n] += av * bk[n];
      }
    }
    for (i64 r = 0; r < kRows; ++r)
      for (i64 n = 0; n < W; ++n) c[(m + r) * ldc + n] = acc[r][n];
  }
}

#ifdef __AVX512F__
// R rows × 64 columns of f32 accumulators (R·4 registers); each k loads the
// four B vectors once into registers and reuses them for the R rows.
template <int R, bool kAccumulate>
inline void gemm_block64_f32(i64 K, const float* a, i64 a_rs, i64 a_ks, const float* b, i64 ldb, float* c, i64 ldc) {
  __m512 acc[R][4];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int x = 0; x < 4; ++x) {
      if constexpr (kAccumulate) {
        acc[r][x] = _mm512_loadu_ps(c + r * ldc + 16 * x);
      } else {
        acc[r][x] = _mm512_setzero_ps();
      }
    }
  }
  for (i64 k = 0; k < K; ++k) {
    const float* bk = b + k * ldb;
    __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps(bk + 16), b2 = _mm512_loadu_ps(bk + 32),
           b3 = _mm512_loadu_ps(bk + 48);
    // Keep the B vectors in registers: GCC would otherwise fold the loads back into
    // every FMA (one load per FMA), which makes the loop load-bound.
    asm("" : "+v"(b0), "+v"(b1), "+v"(b2), "+v"(b3));
    const float* ak = a + k * a_ks;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(ak[r * a_rs]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(av, b2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(av, b3, acc[r][3]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int x = 0; x < 4; ++x) _mm512_storeu_ps(c + r * ldc + 16 * x, acc[r][x]);
  }
}

// The f32 strip of 64 columns: blocks of 6 rows (24 accumulators), then 4 or 2.
template <bool kAccumulate>
inline void gemm_strip64_f32(i64 M, i64 K, const float* a, i64 a_rs, i64 a_ks, const float* b, i64 ldb, float* c, i64 ldc) {
  i64 m = 0;
  for (; m + 6 <= M; m += 6) gemm_block64_f32<6, kAccumulate>(K, a + m * a_rs, a_rs, a_ks, b, ldb, c + m * ldc, ldc);
  if (M - m == 4) gemm_block64_f32<4, kAccumulate>(K, a + m * a_rs, a_rs, a_ks, b, ldb, c + m * ldc, ldc);
  if (M - m == 2) gemm_block64_f32<2, kAccumulate>(K, a + m * a_rs, a_rs, a_ks, b, ldb, c + m * ldc, ldc);
}
#endif

// C[M×N] (+)= A·B over N (a multiple of 16) in strips of 64, 32 or 16 columns.
template <typename A, bool kAccumulate>
inline void gemm_tile(i64 M, i64 N, i64 K, const A* a, i64 a_rs, i64 a_ks, const A* b, i64 ldb, A* c, i64 ldc) {
  if (N % 64 == 0) {
    for (i64 n0 = 0; n0 < N; n0 += 64) {
#ifdef __AVX512F__
      if constexpr (std::is_same_v<A, float>) {
        gemm_strip64_f32<kAccumulate>(M, K, a, a_rs, a_ks, b + n0, ldb, c + n0, ldc);
        continue;
      }
#endif
      gemm_strip<A, 64, kAccumulate>(M, K, a, a_rs, a_ks, b + n0, ldb, c + n0, ldc);
    }
  } else if (N % 32 == 0) {
    for (i64 n0 = 0; n0 < N; n0 += 32) gemm_strip<A, 32, kAccumulate>(M, K, a, a_rs, a_ks, b + n0, ldb, c + n0, ldc);
  } else {
    for (i64 n0 = 0; n0 < N; n0 += 16) gemm_strip<A, 16, kAccumulate>(M, K, a, a_rs, a_ks, b + n0, ldb, c + n0, ldc);
  }
}

}  // namespace trident::kernels::cpu::attention_detail
