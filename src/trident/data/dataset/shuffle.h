// Shuffles that are a pure function of (seed, purpose): Fisher–Yates driven by
// the counter-based RNG, so every rank and every rerun draws the same order.
#pragma once

#include <cstdint>
#include <numeric>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "trident/core/rng.h"

namespace trident::data {

__extension__ typedef unsigned __int128 Uint128;

// A uniform integer in [0, n) from draw `i` of `rng` (64 random bits,
// multiply-shift; the bias is below n / 2^64).
inline std::uint64_t uniform_below(const CounterRng& rng, std::uint64_t i, std::uint64_t n) {
  const auto block = rng.block(i >> 1);
  const std::uint64_t bits = (i & 1) ? (std::uint64_t{block[2]} << 32 | block[3]) : (std::uint64_t{block[0]} << 32 | block[1]);
  return static_cast<std::uint64_t>((static_cast<Uint128>(bits) * n) >> 64);
}

// Shuffles `values` in place: for k = n-1 .. 1, swap k with uniform_below(k, k + 1).
template <typename T>
void shuffle(std::span<T> values, const CounterRng& rng) {
  for (std::size_t k = values.size(); k > 1; --k) {
    const std::size_t j = uniform_below(rng, k - 1, k);
    std::swap(values[k - 1], values[j]);
  }
}

// 0..n-1 shuffled.
inline std::vector<std::int64_t> random_permutation(std::int64_t n, const CounterRng& rng) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), std::int64_t{0});
  shuffle(std::span<std::int64_t>(p), rng);
  return p;
}

}  // namespace trident::data
