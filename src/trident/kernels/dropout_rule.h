// The drop rule every dropout kernel shares (the dropout op and attention's probability dropout, on the
// CPU and CUDA): the element at global index g of a CounterRng stream is dropped iff rng.uniform(g) < p,
// i.e. (bits(g) + 0.5)·2^-32 < p. Scaling by 2^32 is exact, so that is bits(g) + 0.5 < p·2^32, i.e.
// bits(g) < ceil(p·2^32 − 0.5) for the integer bits: an integer compare against `threshold`. When that
// bound exceeds every 32-bit value (p within 2^-33 of 1) every element is dropped. Kept elements are
// multiplied by 1 / (1 − p). Header-only C++17: the CUDA host code includes it too.
#pragma once

#include <cmath>
#include <cstdint>

namespace trident::kernels {

struct DropRule {
  std::uint32_t threshold = 0;  // dropped iff the element's 32-bit word < threshold
  bool drop_all = false;        // every element dropped
  double scale = 1.0;           // 1 / (1 − p), on the kept elements
};

// The rule of dropping with probability p (in [0, 1): the ops check it).
inline DropRule drop_rule(double p) {
  const auto bound = static_cast<std::uint64_t>(std::ceil(p * 0x1p32 - 0.5));
  DropRule r;
  r.drop_all = bound > 0xffffffffull;
  r.threshold = static_cast<std::uint32_t>(r.drop_all ? 0 : bound);
  r.scale = 1.0 / (1.0 - p);
  return r;
}

}  // namespace trident::kernels
