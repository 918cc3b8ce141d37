// Op-table cases for RoPE (Hugging Face rotate_half convention), with a
// position offset (KV cache) and with explicit, unordered positions.
#include <cmath>

#include "op_table.h"
#include "trident/autograd/autograd.h"

namespace trident::testing {
namespace {

namespace ag = trident::autograd;

// out = x·cos + rotate_half(x)·sin with rotate_half(x) = [−x2, x1], as in HF's apply_rotary_pos_emb.
Tensor reference_rope(const Tensor& x, const std::vector<double>& positions, double theta) {
  const Shape& s = x.shape();
  const std::int64_t B = s[0], T = s[1], H = s[2], D = s[3], half = D / 2;
  auto in = values(x);
  std::vector<double> out(in.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::size_t base = static_cast<std::size_t>(((b * T + t) * H + h) * D);
        for (std::int64_t d = 0; d < D; ++d) {
          const std::int64_t i = d % half;
          const double angle = positions[static_cast<std::size_t>(t)] / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(D));
          const double rotated = d < half ? -in[base + d + half] : in[base + d - half];
          out[base + d] = in[base + d] * std::cos(angle) + rotated * std::sin(angle);
        }
      }
  return tensor_from(out, s);
}

OpCase rope_case(std::string name, std::function<std::vector<Variable>(std::mt19937_64&)> make_inputs,
                 std::function<Variable(const std::vector<Variable>&)> forward,
                 std::function<Tensor(const std::vector<Tensor>&)> reference) {
  OpCase c{std::move(name), ops::Op::rope, std::move(make_inputs), std::move(forward), std::move(reference)};
  c.dtypes = {{DType::f64, 1e-12}, {DType::f32, 1e-6}, {DType::bf16, 1e-2}};
  return c;
}

std::vector<OpCase> make_rope_cases() {
  return {
      rope_case(
          "rope_offset", [](std::mt19937_64& g) { return std::vector<Variable>{param(g, {2, 3, 2, 6})}; },
          [](const std::vector<Variable>& in) { return ag::rope(in[0], 5); },
          [](const std::vector<Tensor>& in) { return reference_rope(in[0], {5, 6, 7}, 10000.0); }),
      rope_case(
          "rope_positions_theta500",
          [](std::mt19937_64& g) {
            return std::vector<Variable>{param(g, {1, 4, 3, 8}),
                                         constant(Tensor::from_vector<std::int64_t>({7, 0, 3, 1000}, {4}))};
          },
          [](const std::vector<Variable>& in) { return ag::rope(in[0], in[1].data(), 500.0); },
          [](const std::vector<Tensor>& in) { return reference_rope(in[0], values(in[1]), 500.0); }),
  };
}

TRIDENT_OP_CASES(make_rope_cases);

}  // namespace
}  // namespace trident::testing
