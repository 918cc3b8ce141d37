// The CPU kernels' one exp: e^x in f32 without a library call, in a scalar
// form that compilers vectorise inside loops and an explicit 16-lane AVX-512
// form. Softmax, attention, cross-entropy and the activations all use it.
//
// Numerics (the same for both forms, bit for bit):
//   * x = n·ln2 + r, |r| ≤ ln2/2 (Cody–Waite: ln2 split in two so n·ln2_hi is
//     exact), e^r by a degree-6 minimax polynomial (Cephes' expf coefficients),
//     2^n assembled in the exponent bits from the rounding constant's mantissa
//     (no float-to-int conversion);
//   * relative error below 1e-7 wherever e^x is a normal float (8.2e-8 at
//     worst over tests/ops/exp_test.cpp's sweep of the float bit patterns;
//     the test holds it below 2e-7);
//   * x > ln(FLT_MAX) = 88.7228 gives +inf; x < -87.3 (including -inf) gives
//     exactly 0 (e^-87.3 = 1.3e-38, the smallest results stay normal, so no
//     denormal arithmetic follows); NaN stays NaN.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace trident::kernels::cpu {

namespace exp_detail {
inline constexpr float kLo = -87.3f;       // below: exactly 0
inline constexpr float kHi = 88.7228391f;  // ln(FLT_MAX); above: +inf
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;  // 355/512: few bits, so n * kLn2Hi is exact
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
inline constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace exp_detail

inline float exp_f32(float x) noexcept {
  using namespace exp_detail;
  const float xc = std::min(std::max(x, kLo), kHi);
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;  // an integer in [-126, 128]
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = kP[0];
  for (int i = 1; i < 6; ++i) p = p * r + kP[i];
  p = p * r * r + r + 1.0f;
  // 2^min(n, 127) from t's low mantissa bits; n = 128 (x within 0.7 of the overflow threshold) multiplies
  // by 2 once more. In float arithmetic, not a branch, so that loops over it stay vectorised (a ternary on
  // the integer made GCC 12 give up: 4 ns instead of 0.8 ns per value).
  const float top = n > 127.0f ? 1.0f : 0.0f;
  const std::uint32_t e =
      std::bit_cast<std::uint32_t>(t) - std::bit_cast<std::uint32_t>(kRound) + 127u - static_cast<std::uint32_t>(top);
  const float y = p * std::bit_cast<float>(e << 23) * (1.0f + top);
  return x < kLo ? 0.0f : (x > kHi ? std::numeric_limits<float>::infinity() : y);
}

// f32 through exp_f32, f64 through the library.
template <typename A>
inline A exp_acc(A x) noexcept {
  static_assert(std::is_same_v<A, float> || std::is_same_v<A, double>);
  if constexpr (std::is_same_v<A, float>) {
    return exp_f32(x);
  } else {
    return std::exp(x);
  }
}

#ifdef __AVX512F__
// exp_f32 on 16 lanes: the same steps, so the same accuracy and special values.
inline __m512 exp_f32x16(__m512 x) noexcept {
  using namespace exp_detail;
  // Zero-masked forms with an all-ones mask: the unmasked intrinsics start from
  // _mm512_undefined_*(), which GCC 12 reports as an uninitialised read.
  constexpr __mmask16 kAll = 0xffff;
  const __m512 lo = _mm512_set1_ps(kLo), hi = _mm512_set1_ps(kHi), round = _mm512_set1_ps(kRound);
  // Operand order matters: min/max return their second operand when one is NaN, so NaN flows through.
  const __m512 xc = _mm512_maskz_min_ps(kAll, hi, _mm512_maskz_max_ps(kAll, lo, x));
  const __m512 t = _mm512_fmadd_ps(xc, _mm512_set1_ps(kLog2e), round);
  const __m512 n = _mm512_sub_ps(t, round);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), xc));
  __m512 p = _mm512_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP[i]));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __mmask16 top = _mm512_cmp_ps_mask(n, _mm512_set1_ps(127.0f), _CMP_GT_OQ);
  const __m512i biased =
      _mm512_add_epi32(_mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(round)), _mm512_set1_epi32(127));
  const __m512i e = _mm512_mask_sub_epi32(biased, top, biased, _mm512_set1_epi32(1));
  __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, e, 23)));
  y = _mm512_mask_mul_ps(y, top, y, _mm512_set1_ps(2.0f));
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ),
                         _mm512_set1_ps(std::numeric_limits<float>::infinity()));
  // x < -87.3 (including -inf) gives 0; NaN fails the comparison and stays NaN.
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), y);
}
#endif

}  // namespace trident::kernels::cpu
