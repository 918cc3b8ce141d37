// CPU softmax kernels over the last dimension, and the 16-lane load that the
// softmax-like kernels (softmax, attention) share; their exp is exp.h's.
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
#include "trident/kernels/cpu/exp.h"

namespace trident::kernels::cpu {
#include "trident/kernels/softmax.h"

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

}  // namespace trident::kernels::cpu
