#include "trident/ops/rope.h"

#include <cmath>
#include <numeric>
#include <vector>

#include "trident/kernels/cpu/rope.h"
#include "trident/ops/dispatch.h"

namespace trident::ops {

namespace {

void check_rope_input(std::string_view op, const Tensor& x, const RopeFrequencies& freq) {
  check_defined(x, op, "x");
  TRIDENT_CHECK(x.rank() == 4, "{}: x must have shape [B, T, H, D], got {}", op, x.shape());
  check_floating(x, op, "x");
  TRIDENT_CHECK(x.size(3) % 2 == 0, "{}: head dim D = {} of x {} must be even (pairs i and i + D/2 rotate together)",
                op, x.size(3), x.shape());
  const auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  TRIDENT_CHECK(positive(freq.theta), "{}: theta {} must be positive and finite (x {})", op, freq.theta, x.shape());
  if (freq.scaling != RopeScaling::none) {
    TRIDENT_CHECK(positive(freq.factor), "{}: scaling factor {} must be positive and finite", op, freq.factor);
  }
  if (freq.scaling == RopeScaling::llama3) {
    TRIDENT_CHECK(positive(freq.low_freq_factor) && positive(freq.original_max_position) &&
                      std::isfinite(freq.high_freq_factor) && freq.high_freq_factor > freq.low_freq_factor,
                  "{}: llama3 scaling needs 0 < low_freq_factor < high_freq_factor and a positive "
                  "original_max_position, got {}, {} and {}",
                  op, freq.low_freq_factor, freq.high_freq_factor, freq.original_max_position);
  }
}

Tensor run(const Tensor& x, const std::int64_t* positions, const RopeFrequencies& freq, bool inverse) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  TRIDENT_KERNEL(x.device(), rope, x.dtype(), x.raw_data(), out.raw_data(), positions, x.size(0), x.size(1), x.size(2),
                 x.size(3), freq, inverse);
  return out;
}

Tensor with_offset(std::string_view op, const Tensor& x, std::int64_t offset, const RopeFrequencies& freq,
                   bool inverse) {
  check_rope_input(op, x, freq);
  std::vector<std::int64_t> positions(static_cast<std::size_t>(x.size(1)));
  std::iota(positions.begin(), positions.end(), offset);
  return run(x, positions.data(), freq, inverse);
}

Tensor with_positions(std::string_view op, const Tensor& x, const Tensor& positions, const RopeFrequencies& freq,
                      bool inverse) {
  check_rope_input(op, x, freq);
  check_defined(positions, op, "positions");
  TRIDENT_CHECK((positions.rank() == 1 && positions.size(0) == x.size(1)) ||
                    (positions.rank() == 2 && positions.size(0) == x.size(0) && positions.size(1) == x.size(1)),
                "{}: positions {} must have shape [T] = [{}] or [B, T] = [{}, {}] for x {}", op, positions.shape(),
                x.size(1), x.size(0), x.size(1), x.shape());
  TRIDENT_CHECK(positions.dtype() == DType::i64 || positions.dtype() == DType::i32,
                "{}: positions have dtype {} (shape {}), expected i64 or i32", op, positions.dtype(),
                positions.shape());
  // The kernels take positions as a host array; positions on x's device are read back first.
  TRIDENT_CHECK(positions.device().is_cpu() || positions.device() == x.device(),
                "{}: positions on {} but x {} is on {}", op, positions.device(), x.shape(), x.device());
  const Tensor pos = positions.to(Device::cpu()).to(DType::i64);
  if (positions.rank() == 1) return run(x, pos.data<std::int64_t>(), freq, inverse);
  // Each sample's own positions (packed documents, positions restarting at each): one call per sample.
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const std::int64_t T = x.size(1), row = T * x.size(2) * x.size(3);
  for (std::int64_t b = 0; b < x.size(0); ++b) {
    const auto bytes = static_cast<std::size_t>(b * row) * dtype_size(x.dtype());
    TRIDENT_KERNEL(x.device(), rope, x.dtype(), static_cast<const char*>(x.raw_data()) + bytes,
                   static_cast<char*>(out.raw_data()) + bytes, pos.data<std::int64_t>() + b * T, std::int64_t{1}, T,
                   x.size(2), x.size(3), freq, inverse);
  }
  return out;
}

}  // namespace

Tensor rope(const Tensor& x, std::int64_t position_offset, const RopeFrequencies& freq) {
  return with_offset("rope", x, position_offset, freq, false);
}
Tensor rope(const Tensor& x, const Tensor& positions, const RopeFrequencies& freq) {
  return with_positions("rope", x, positions, freq, false);
}
Tensor rope_backward(const Tensor& dy, std::int64_t position_offset, const RopeFrequencies& freq) {
  return with_offset("rope_backward", dy, position_offset, freq, true);
}
Tensor rope_backward(const Tensor& dy, const Tensor& positions, const RopeFrequencies& freq) {
  return with_positions("rope_backward", dy, positions, freq, true);
}

}  // namespace trident::ops
