#include "trident/core/rng.h"

#include <cmath>
#include <numbers>

#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/core/tensor.h"

namespace trident {

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> c, std::array<std::uint32_t, 2> k) noexcept {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c[2];
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

std::uint64_t stream_id(std::string_view purpose) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : purpose) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::array<std::uint32_t, 4> CounterRng::block(std::uint64_t index) const noexcept {
  return philox4x32_10({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                        static_cast<std::uint32_t>(stream_), static_cast<std::uint32_t>(stream_ >> 32)},
                       {static_cast<std::uint32_t>(seed_), static_cast<std::uint32_t>(seed_ >> 32)});
}

double CounterRng::normal(std::uint64_t i) const noexcept {
  const auto b = block(i >> 1);
  const std::size_t w = (i & 1) * 2;
  const double u1 = (static_cast<double>(b[w]) + 0.5) * 0x1p-32;
  const double u2 = (static_cast<double>(b[w + 1]) + 0.5) * 0x1p-32;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

CounterRng CounterRng::derive(std::string_view purpose) const noexcept {
  std::uint64_t h = stream_ ^ 0x9E3779B97F4A7C15ull;
  for (unsigned char ch : purpose) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return CounterRng(seed_, h);
}

namespace {

// Calls f(local_linear_index, global_linear_index) for every element, row by row.
template <typename Value>
void fill_by_global_index(Tensor& t, const GlobalSlice& slice, Value&& value) {
  check_cpu(t, "rng fill");
  check_floating(t, "rng fill", "tensor");
  const Shape& local = t.shape();
  const std::int64_t n = t.numel();
  if (n == 0) return;
  const std::size_t r = local.rank();
  if (!slice.empty()) {
    TRIDENT_CHECK(slice.global_shape.rank() == r && slice.offsets.size() == r,
                  "rng fill: slice of global shape {} with {} offsets does not match local shape {}",
                  slice.global_shape, slice.offsets.size(), local);
    for (std::size_t d = 0; d < r; ++d) {
      TRIDENT_CHECK(slice.offsets[d] >= 0 && slice.offsets[d] + local[d] <= slice.global_shape[d],
                    "rng fill: local shape {} at offsets [{}] exceeds global shape {}", local,
                    fmt::join(slice.offsets, ", "), slice.global_shape);
    }
  }
  const std::int64_t row = r == 0 ? 1 : local[r - 1];
  const std::int64_t rows = n / row;
  TRIDENT_DISPATCH_FLOAT(t.dtype(), "rng fill", [&] {
    scalar_t* out = t.data<scalar_t>();
    parallel_for(0, rows, 64, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t rr = lo; rr < hi; ++rr) {
        std::int64_t global_base = rr * row;
        if (!slice.empty()) {
          // Decompose the local row index into coordinates, shift, re-linearise globally.
          std::int64_t rem = rr;
          std::int64_t g = 0, stride = 1;
          g = slice.offsets[r - 1];
          stride = slice.global_shape[r - 1];
          for (std::size_t d = r - 1; d-- > 0;) {
            std::int64_t coord = rem % local[d] + slice.offsets[d];
            rem /= local[d];
            g += coord * stride;
            stride *= slice.global_shape[d];
          }
          global_base = g;
        }
        for (std::int64_t j = 0; j < row; ++j) {
          out[rr * row + j] = store<scalar_t>(static_cast<acc_t<scalar_t>>(value(static_cast<std::uint64_t>(global_base + j))));
        }
      }
    });
  });
}

}  // namespace

void fill_uniform(Tensor& t, const CounterRng& rng, double low, double high, const GlobalSlice& slice) {
  fill_by_global_index(t, slice, [&](std::uint64_t i) { return low + (high - low) * rng.uniform(i); });
}

void fill_normal(Tensor& t, const CounterRng& rng, double mean, double stddev, const GlobalSlice& slice) {
  fill_by_global_index(t, slice, [&](std::uint64_t i) { return mean + stddev * rng.normal(i); });
}

}  // namespace trident
