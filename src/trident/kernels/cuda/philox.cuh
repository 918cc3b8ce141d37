// The counter-based generator on the device, shared by the dropout kernels (dropout.cu, and attention's
// probability dropout in attention.cu and attention_mma.cu): bit for bit CounterRng::block (core/rng.h).
// .cu files only.
#pragma once

#include <cstdint>

namespace trident::kernels::cuda {

// Mirrors trident::philox4x32_10 (core/rng.cpp) with the counter and key that
// CounterRng::block(index) builds: counter = (index lo, index hi, stream lo,
// stream hi), key = (seed lo, seed hi). Returns the block's four words.
__device__ __forceinline__ uint4 philox_block(std::uint64_t index, std::uint64_t stream, std::uint64_t seed) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  std::uint32_t c0 = static_cast<std::uint32_t>(index), c1 = static_cast<std::uint32_t>(index >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(stream), c3 = static_cast<std::uint32_t>(stream >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const std::uint32_t hi0 = __umulhi(kM0, c0), lo0 = kM0 * c0;
    const std::uint32_t hi1 = __umulhi(kM1, c2), lo1 = kM1 * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return make_uint4(c0, c1, c2, c3);
}

// Word g % 4 of block g / 4: CounterRng::bits(g).
__device__ __forceinline__ std::uint32_t philox_word(std::uint64_t g, std::uint64_t stream, std::uint64_t seed) {
  const uint4 b = philox_block(g >> 2, stream, seed);
  switch (g & 3) {
    case 0:
      return b.x;
    case 1:
      return b.y;
    case 2:
      return b.z;
    default:
      return b.w;
  }
}

}  // namespace trident::kernels::cuda
