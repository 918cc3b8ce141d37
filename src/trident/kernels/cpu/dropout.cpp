// Dropout: rows (along the last dimension) map to runs of consecutive global
// indices, so each row draws its random words 16 Philox blocks (64 words) at a
// time (with AVX-512, all 16 blocks at once in vector lanes; otherwise through
// CounterRng::block). The words are bit-identical to CounterRng::bits (tests/ops/dropout_test.cpp checks it),
// and every element depends only on its global index: no dependence on the
// thread count or on how the tensor is sharded.
#include "trident/kernels/cpu/dropout.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <type_traits>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"

namespace trident::kernels::cpu {

namespace {

constexpr int kBatch = 16;  // Philox blocks per batch
constexpr int kWords = 4 * kBatch;

// Rounds to T once (store<T> of core/dtype.h).
template <typename T, typename A>
inline T round_to(A v) noexcept {
  return store<T>(v);  // bf16 rounding is inline in core/dtype.h, so this vectorises
}

constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // Philox-4x32 multipliers
constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // and key increments

// words[4 * l + w] = word w of Philox block (first + l), exactly as CounterRng::block computes it.
#ifdef __AVX512F__
// GCC 12 flags the intrinsics' internal _mm512_undefined_* operands; they are not ours to fix.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// 16 blocks in the 16 32-bit lanes of a zmm register: the 32x32->64 products
// are formed for even and odd lanes separately (vpmuludq) and their high
// halves blended back; the four result vectors are then transposed to the
// block-major order of the scalar generator.
inline __m512i mul_hi(__m512i a, __m512i m) {
  const __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(a, m), 32);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  return _mm512_mask_blend_epi32(0xAAAA, even, odd);
}

template <int Q>
inline void store_quarter(std::uint32_t* words, __m512i u0, __m512i u1, __m512i u2, __m512i u3) {
  auto* out = reinterpret_cast<__m128i*>(words + 16 * Q);
  _mm_storeu_si128(out + 0, _mm512_extracti32x4_epi32(u0, Q));
  _mm_storeu_si128(out + 1, _mm512_extracti32x4_epi32(u1, Q));
  _mm_storeu_si128(out + 2, _mm512_extracti32x4_epi32(u2, Q));
  _mm_storeu_si128(out + 3, _mm512_extracti32x4_epi32(u3, Q));
}

void philox_words(const CounterRng& rng, std::uint64_t first, std::uint32_t* words) {
  const auto lo = static_cast<std::uint32_t>(first), hi = static_cast<std::uint32_t>(first >> 32);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i vlo = _mm512_set1_epi32(static_cast<int>(lo));
  __m512i c0 = _mm512_add_epi32(vlo, lane);
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, vlo);  // the low word wrapped: carry into the high word
  __m512i c1 = _mm512_mask_add_epi32(_mm512_set1_epi32(static_cast<int>(hi)), carry,
                                     _mm512_set1_epi32(static_cast<int>(hi)), _mm512_set1_epi32(1));
  __m512i c2 = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(rng.stream())));
  __m512i c3 = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(rng.stream() >> 32)));
  auto k0 = static_cast<std::uint32_t>(rng.seed()), k1 = static_cast<std::uint32_t>(rng.seed() >> 32);
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(kM0)), m1 = _mm512_set1_epi32(static_cast<int>(kM1));
  for (int round = 0; round < 10; ++round) {
    const __m512i hi0 = mul_hi(c0, m0), lo0 = _mm512_mullo_epi32(c0, m0);
    const __m512i hi1 = mul_hi(c2, m1), lo1 = _mm512_mullo_epi32(c2, m1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
    c1 = lo1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  // Per 128-bit quarter q: u_k holds block 4q + k as (c0, c1, c2, c3).
  const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
  const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
  const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
  const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
  store_quarter<0>(words, u0, u1, u2, u3);
  store_quarter<1>(words, u0, u1, u2, u3);
  store_quarter<2>(words, u0, u1, u2, u3);
  store_quarter<3>(words, u0, u1, u2, u3);
}
#pragma GCC diagnostic pop
#else
void philox_words(const CounterRng& rng, std::uint64_t first, std::uint32_t* words) {
  for (int l = 0; l < kBatch; ++l) {
    const auto block = rng.block(first + static_cast<std::uint64_t>(l));
    for (int w = 0; w < 4; ++w) words[4 * l + w] = block[static_cast<std::size_t>(w)];
  }
}
#endif

// Global index of the first element of every local row (rows along the last dimension).
std::int64_t row_global_base(std::int64_t row, const Shape& local, const GlobalSlice& slice) {
  const std::size_t r = local.rank();
  if (slice.empty() || r == 0) return row * (r == 0 ? 1 : local[r - 1]);
  std::int64_t rem = row;
  std::int64_t g = slice.offsets[r - 1];
  std::int64_t stride = slice.global_shape[r - 1];
  for (std::size_t d = r - 1; d-- > 0;) {
    g += (rem % local[d] + slice.offsets[d]) * stride;
    rem /= local[d];
    stride *= slice.global_shape[d];
  }
  return g;
}

template <typename T>
void dropout_impl(const T* x, T* y, const Shape& local, double p, const CounterRng& rng, const GlobalSlice& slice) {
  using A = acc_t<T>;
  const std::int64_t n = local.numel();
  if (n == 0) return;
  const std::int64_t row = local.rank() == 0 ? 1 : local[local.rank() - 1];
  const std::int64_t rows = n / row;
  // Dropped iff uniform(g) < p: an integer compare of the element's word (kernels/dropout_rule.h).
  const DropRule rule = drop_rule(p);
  const bool drop_all = rule.drop_all;
  const std::uint32_t threshold = rule.threshold;
  const A scale = static_cast<A>(rule.scale);
  parallel_for(0, rows, std::max<std::int64_t>(1, (std::int64_t{1} << 13) / row), [&](std::int64_t lo, std::int64_t hi) {
    alignas(64) std::uint32_t words[kWords];
    // Local copies: the output stores could otherwise alias the captured references, which blocks vectorisation.
    const A s = scale;
    const std::uint32_t t = threshold;
    for (std::int64_t r = lo; r < hi; ++r) {
      const auto g0 = static_cast<std::uint64_t>(row_global_base(r, local, slice));
      const T* xr = x + r * row;
      T* yr = y + r * row;
      if (drop_all) {
        for (std::int64_t j = 0; j < row; ++j) yr[j] = round_to<T>(A(0));
        continue;
      }
      std::int64_t j = 0;
      while (j < row) {
        // Words [first_block * 4, first_block * 4 + 64) cover global indices g0 + j onwards.
        const std::uint64_t g = g0 + static_cast<std::uint64_t>(j);
        const std::uint64_t first_block = g >> 2;
        philox_words(rng, first_block, words);
        const std::uint32_t* bits = words + (g & 3);
        const std::int64_t count = std::min<std::int64_t>(row - j, kWords - static_cast<std::int64_t>(g & 3));
        const T* xs = xr + j;
        T* ys = yr + j;
        // x * 0 for dropped elements (as PyTorch's x * mask: inf and NaN give NaN), branch-free so it vectorises.
        for (std::int64_t k = 0; k < count; ++k) ys[k] = round_to<T>(load(xs[k]) * (bits[k] >= t ? s : A(0)));
        j += count;
      }
    }
  });
}

}  // namespace

template <typename A>
void dropout_keep_factors(const CounterRng& rng, std::uint64_t first, std::int64_t n, const DropRule& rule, A* keep) {
  if (rule.drop_all) {
    std::fill_n(keep, n, A(0));
    return;
  }
  alignas(64) std::uint32_t words[kWords];
  const A s = static_cast<A>(rule.scale);
  const std::uint32_t t = rule.threshold;
  for (std::int64_t j = 0; j < n;) {
    const std::uint64_t g = first + static_cast<std::uint64_t>(j);
    philox_words(rng, g >> 2, words);  // words of global indices (g & ~3) onwards
    const std::uint32_t* bits = words + (g & 3);
    const std::int64_t count = std::min<std::int64_t>(n - j, kWords - static_cast<std::int64_t>(g & 3));
    for (std::int64_t k = 0; k < count; ++k) keep[j + k] = bits[k] >= t ? s : A(0);
    j += count;
  }
}

template void dropout_keep_factors<float>(const CounterRng&, std::uint64_t, std::int64_t, const DropRule&, float*);
template void dropout_keep_factors<double>(const CounterRng&, std::uint64_t, std::int64_t, const DropRule&, double*);

void dropout(DType dtype, const void* x, void* y, const Shape& local, double p, const CounterRng& rng,
             const GlobalSlice& slice) {
  TRIDENT_DISPATCH_FLOAT(dtype, "dropout", [&] {
    dropout_impl(static_cast<const scalar_t*>(x), static_cast<scalar_t*>(y), local, p, rng, slice);
  });
}

}  // namespace trident::kernels::cpu
