// CPU softmax kernels over the last dimension, and the vectorisable exp that
// every softmax-like kernel (softmax, attention) shares.
//
// Shapes: x, y, dy, dx are contiguous [rows, cols] arrays of one floating
// dtype. Arithmetic is in acc_t<T> (f32 for f32/bf16/f16, f64 for f64), results
// are rounded once on store. Each row is max-subtracted before exp, so large
// logits do not overflow. A row whose entries are all -inf has no defined
// distribution; it yields zeros (not NaN), as fully masked attention rows do.
// Rows are independent, so results do not depend on the thread count.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "trident/core/dtype.h"

namespace trident::kernels::cpu {
#include "trident/kernels/softmax.h"

// exp(x) in f32 with a relative error below 2e-7, written without library calls
// so that loops over it vectorise. Exact 0 for x < -87.3 (including -inf),
// NaN propagates; inputs above 88 saturate at exp(88) — callers pass
// max-subtracted logits, which are ≤ 0.
inline float exp_f32(float x) noexcept {
  constexpr float kLo = -87.3f, kHi = 88.0f;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = std::min(std::max(x, kLo), kHi);
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;  // |r| ≤ ln2 / 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n from the rounded bits of t: n ∈ [-126, 127] after the clamp.
  const std::uint32_t bits = (std::bit_cast<std::uint32_t>(t) - std::bit_cast<std::uint32_t>(kRound) + 127u) << 23;
  const float y = p * std::bit_cast<float>(bits);
  return x < kLo ? 0.0f : y;
}

// Rounds to T once (store<T> of core/dtype.h).
template <typename T, typename A>
inline T store_fast(A v) noexcept {
  return store<T>(v);  // bf16 rounding is inline in core/dtype.h, so this vectorises
}

#ifdef __AVX512F__
// exp_f32 on 16 lanes (the same steps, so the same accuracy and special values).
inline __m512 exp_f32x16(__m512 x) noexcept {
  // Zero-masked forms with an all-ones mask: the unmasked intrinsics start from
  // _mm512_undefined_*(), which GCC 12 reports as an uninitialised read.
  constexpr __mmask16 kAll = 0xffff;
  const __m512 lo = _mm512_set1_ps(-87.3f), round = _mm512_set1_ps(12582912.0f);
  // Operand order matters: min/max return their second operand when one is NaN, so NaN flows through.
  const __m512 xc = _mm512_maskz_min_ps(kAll, _mm512_set1_ps(88.0f), _mm512_maskz_max_ps(kAll, lo, x));
  const __m512 t = _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), round);
  const __m512 n = _mm512_sub_ps(t, round);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc));
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i bits = _mm512_maskz_slli_epi32(
      kAll, _mm512_add_epi32(_mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(round)), _mm512_set1_epi32(127)), 23);
  const __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
  // x < -87.3 (including -inf) gives 0; NaN fails the comparison and stays NaN.
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), y);
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
// 16 consecutive f32, bf16 or f16 elements as f32; lanes outside `keep` read
// nothing and give 0.
template <typename T>
inline __m512 load_f32x16(const T* p, __mmask16 keep) noexcept {
  constexpr __mmask16 kAll = 0xffff;  // zero-masked forms: see exp_f32x16
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_maskz_loadu_ps(keep, p);
  } else if constexpr (std::is_same_v<T, bf16>) {
    const __m512i wide = _mm512_maskz_cvtepu16_epi32(kAll, _mm256_maskz_loadu_epi16(keep, p));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, wide, 16));
  } else {
    static_assert(std::is_same_v<T, f16>);
    return _mm512_maskz_cvtph_ps(kAll, _mm256_maskz_loadu_epi16(keep, p));
  }
}
#endif

inline float exp_acc(float x) noexcept { return exp_f32(x); }
inline double exp_acc(double x) noexcept { return std::exp(x); }

}  // namespace trident::kernels::cpu
