// The fixed-order lane sum behind the CPU kernels' row reductions: LayerNorm's
// and RMSNorm's row statistics (norm.cpp), cross-entropy's sum of exponentials
// (loss.cpp) and the optimizer's sum of squares (optimizer.cpp). Internal to
// kernels/cpu.
//
// lane_sum<Lanes, Fold, A>(n, term) = Σ term(i) for 0 ≤ i < n, in A, as Lanes
// running sums: lane l adds term(l), term(l + Lanes), term(l + 2·Lanes), ... over
// the whole blocks of Lanes terms, then the lanes are folded in one fixed order:
//   LaneFold::in_order  ((0 + lane 0) + lane 1) + ... + lane Lanes−1, then the
//                       n mod Lanes remaining terms in increasing i;
//   LaneFold::pairwise  the remaining terms go into lanes 0, 1, ... first, then a
//                       pairwise tree: lane l += lane l + w for w = Lanes/2, ..., 1.
// The lane loop is a plain loop over a fixed array, which the compiler vectorises
// without -ffast-math (every lane is its own chain, so nothing is reassociated),
// and the order depends on n alone: the result is the same for every thread count
// and vector width. The order is part of each caller's numerics (its bits), which
// is why the fold and the lane count are parameters: norm.cpp uses 64 lanes,
// pairwise; loss.cpp and optimizer.cpp 32 lanes, in order.
//
// Error: |sum − exact| ≤ γ_k Σ|term(i)|, γ_k = k·u / (1 − k·u) with u the unit
// roundoff of A (2^-24 for f32, 2^-53 for f64) and k the additions on the longest
// path: n/Lanes + Lanes (in_order) or n/Lanes + log2(Lanes) + 1 (pairwise).
// Special values are IEEE addition's: a NaN term, or +inf and −inf terms together,
// give NaN; +inf (−inf) terms alone give +inf (−inf); a finite sum past A's range
// overflows to ±inf; n ≤ 0 gives +0.
#pragma once

#include <cstdint>

namespace trident::kernels::cpu {

enum class LaneFold { in_order, pairwise };

template <int Lanes, LaneFold Fold, typename A, typename F>
inline A lane_sum(std::int64_t n, F&& term) {
  static_assert(Lanes > 0 && (Lanes & (Lanes - 1)) == 0, "lane_sum: Lanes must be a power of two");
  A acc[Lanes] = {};
  std::int64_t i = 0;
  for (; i + Lanes <= n; i += Lanes) {
    for (int l = 0; l < Lanes; ++l) acc[l] += term(i + l);
  }
  if constexpr (Fold == LaneFold::pairwise) {
    for (int l = 0; i + l < n; ++l) acc[l] += term(i + l);
    for (int w = Lanes / 2; w > 0; w /= 2) {
      for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
    }
    return acc[0];
  } else {
    A total = 0;
    for (int l = 0; l < Lanes; ++l) total += acc[l];
    for (; i < n; ++i) total += term(i);
    return total;
  }
}

}  // namespace trident::kernels::cpu
