// Counter-based random numbers (Philox-4x32-10, Salmon et al. 2011).
//
// Every random number in trident is a pure function of (seed, stream, index):
// no generator state advances. A stream is usually derived from a purpose
// string (a parameter's canonical name, "dropout/layer3/mb7", "data/shuffle").
// Filling a slice of a logical tensor therefore yields exactly the numbers the
// whole tensor would have at those global positions — which is what makes
// every parallel layout initialise and drop out identically (docs/numerics.md#counter-based-randomness).
//
// Element i of a stream: uniform(i) uses 32-bit word i%4 of Philox block i/4;
// normal(i) applies Box–Muller to words (2(i%2), 2(i%2)+1) of block i/2.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "trident/core/shape.h"

namespace trident {

class Tensor;

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key) noexcept;

// 64-bit FNV-1a of a string: stable stream ids from purpose names.
std::uint64_t stream_id(std::string_view purpose) noexcept;

class CounterRng {
 public:
  CounterRng(std::uint64_t seed, std::uint64_t stream) noexcept : seed_(seed), stream_(stream) {}
  CounterRng(std::uint64_t seed, std::string_view purpose) noexcept : CounterRng(seed, stream_id(purpose)) {}

  std::array<std::uint32_t, 4> block(std::uint64_t index) const noexcept;
  std::uint32_t bits(std::uint64_t i) const noexcept { return block(i >> 2)[i & 3]; }
  // Uniform in the open interval (0, 1), 32-bit resolution.
  double uniform(std::uint64_t i) const noexcept { return (static_cast<double>(bits(i)) + 0.5) * 0x1p-32; }
  // Standard normal.
  double normal(std::uint64_t i) const noexcept;

  std::uint64_t seed() const noexcept { return seed_; }
  std::uint64_t stream() const noexcept { return stream_; }
  // A derived stream, e.g. rng.derive("layer3").
  CounterRng derive(std::string_view purpose) const noexcept;

 private:
  std::uint64_t seed_;
  std::uint64_t stream_;
};

// Where a local tensor sits inside its logical (global) tensor: a box at
// `offsets` within `global_shape`. The local tensor's shape is the box's extent.
// An empty GlobalSlice means "the local tensor is the whole tensor".
struct GlobalSlice {
  Shape global_shape;
  std::vector<std::int64_t> offsets;
  bool empty() const noexcept { return global_shape.rank() == 0 && offsets.empty(); }
};

// Fill a floating tensor on the host with the stream's values at the global
// indices of its elements (row-major in the global shape).
void fill_uniform(Tensor& t, const CounterRng& rng, double low, double high, const GlobalSlice& slice = {});
void fill_normal(Tensor& t, const CounterRng& rng, double mean, double stddev, const GlobalSlice& slice = {});

}  // namespace trident
