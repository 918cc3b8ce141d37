// Dropout: rows (along the last dimension) map to runs of consecutive global
// indices, so each row draws its random words 16 Philox blocks (64 words) at a
// time with a lane-parallel Philox that the compiler vectorises. The words are
// bit-identical to CounterRng::bits (tests/ops/dropout_test.cpp checks it),
// and every element depends only on its global index: no dependence on the
// thread count or on how the tensor is sharded.
#include "trident/kernels/cpu/dropout.h"

#include <algorithm>
#include <array>

#include "trident/core/error.h"
#include "trident/core/parallel.h"

namespace trident::kernels::cpu {

namespace {

constexpr int kBatch = 16;  // Philox blocks per batch
constexpr int kWords = 4 * kBatch;

// words[4 * l + w] = word w of Philox block (first + l), exactly as CounterRng::block computes it.
void philox_words(const CounterRng& rng, std::uint64_t first, std::uint32_t* words) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  std::uint32_t c0[kBatch], c1[kBatch], c2[kBatch], c3[kBatch];
  const auto s0 = static_cast<std::uint32_t>(rng.stream()), s1 = static_cast<std::uint32_t>(rng.stream() >> 32);
  for (int l = 0; l < kBatch; ++l) {
    const std::uint64_t idx = first + static_cast<std::uint64_t>(l);
    c0[l] = static_cast<std::uint32_t>(idx);
    c1[l] = static_cast<std::uint32_t>(idx >> 32);
    c2[l] = s0;
    c3[l] = s1;
  }
  std::uint32_t k0 = static_cast<std::uint32_t>(rng.seed()), k1 = static_cast<std::uint32_t>(rng.seed() >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int l = 0; l < kBatch; ++l) {
      const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c0[l];
      const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c2[l];
      const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
      const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
      c0[l] = n0;
      c1[l] = static_cast<std::uint32_t>(p1);
      c2[l] = n2;
      c3[l] = static_cast<std::uint32_t>(p0);
    }
    k0 += kW0;
    k1 += kW1;
  }
  for (int l = 0; l < kBatch; ++l) {
    words[4 * l + 0] = c0[l];
    words[4 * l + 1] = c1[l];
    words[4 * l + 2] = c2[l];
    words[4 * l + 3] = c3[l];
  }
}

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
  // uniform(g) = (bits + 0.5) 2^-32 < p  <=>  bits + 0.5 < p 2^32 (scaling by 2^32 is exact).
  const double threshold = p * 0x1p32;
  const A scale = static_cast<A>(1.0 / (1.0 - p));
  parallel_for(0, rows, std::max<std::int64_t>(1, (std::int64_t{1} << 13) / row), [&](std::int64_t lo, std::int64_t hi) {
    alignas(64) std::uint32_t words[kWords];
    for (std::int64_t r = lo; r < hi; ++r) {
      const auto g0 = static_cast<std::uint64_t>(row_global_base(r, local, slice));
      const T* xr = x + r * row;
      T* yr = y + r * row;
      std::int64_t j = 0;
      while (j < row) {
        const std::uint64_t first_block = (g0 + static_cast<std::uint64_t>(j)) >> 2;
        philox_words(rng, first_block, words);
        const std::uint64_t word0 = first_block * 4;
        const std::int64_t end = std::min<std::int64_t>(row, static_cast<std::int64_t>(word0 + kWords - g0));
        const std::int64_t shift = static_cast<std::int64_t>(g0 - word0);  // words index = j + shift
        for (; j < end; ++j) {
          const bool keep = static_cast<double>(words[j + shift]) + 0.5 >= threshold;
          yr[j] = keep ? store<T>(load(xr[j]) * scale) : T(A(0));
        }
      }
    }
  });
}

}  // namespace

void dropout(DType dtype, const void* x, void* y, const Shape& local, double p, const CounterRng& rng,
             const GlobalSlice& slice) {
  TRIDENT_DISPATCH_FLOAT(dtype, "dropout", [&] {
    dropout_impl(static_cast<const scalar_t*>(x), static_cast<scalar_t*>(y), local, p, rng, slice);
  });
}

}  // namespace trident::kernels::cpu
