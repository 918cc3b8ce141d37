// Op-table cases for RoPE (Hugging Face rotate_half convention), with a
// position offset (KV cache), with explicit, unordered positions, and with
// the linear and llama3 frequency scalings.
#include <cmath>

#include "op_table.h"
#include "trident/autograd/autograd.h"

namespace trident::testing {
namespace {

namespace ag = trident::autograd;

// Frequencies of pairs i < D/2, as transformers' modeling_rope_utils computes them: theta^(−2i/D), then
// for llama3 (Llama 3.1) masks over the wavelengths 2π/f: long ones divided by `factor`, short ones
// kept, the band between interpolated.
struct Scaling {
  std::string type = "default";
  double factor = 1, low = 1, high = 4, original = 8192;
};

std::vector<double> reference_inv_freq(double theta, std::int64_t D, const Scaling& sc = {}) {
  std::vector<double> f;
  for (std::int64_t i = 0; 2 * i < D; ++i)
    f.push_back(1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(D)));
  if (sc.type == "linear") {
    for (double& v : f) v /= sc.factor;
  } else if (sc.type == "llama3") {
    for (double& v : f) {
      const double wavelength = 2 * M_PI / v;
      const double divided = wavelength > sc.original / sc.low ? v / sc.factor : v;
      const double smooth = (sc.original / wavelength - sc.low) / (sc.high - sc.low);
      const bool medium = !(wavelength < sc.original / sc.high) && !(wavelength > sc.original / sc.low);
      v = medium ? (1 - smooth) * divided / sc.factor + smooth * divided : divided;
    }
  }
  return f;
}

// out = x·cos + rotate_half(x)·sin with rotate_half(x) = [−x2, x1], as in HF's apply_rotary_pos_emb.
Tensor reference_rope(const Tensor& x, const std::vector<double>& positions, const std::vector<double>& inv_freq) {
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
          const double angle = positions[static_cast<std::size_t>(t)] * inv_freq[static_cast<std::size_t>(i)];
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
          "rope_offset",
          [](std::mt19937_64& g) {
            return std::vector<Variable>{param(g, {2, 3, 2, 6})};
          },
          [](const std::vector<Variable>& in) { return ag::rope(in[0], 5); },
          [](const std::vector<Tensor>& in) {
            return reference_rope(in[0], {5, 6, 7}, reference_inv_freq(10000.0, 6));
          }),
      rope_case(
          "rope_positions_theta500",
          [](std::mt19937_64& g) {
            return std::vector<Variable>{param(g, {1, 4, 3, 8}),
                                         constant(Tensor::from_vector<std::int64_t>({7, 0, 3, 1000}, {4}))};
          },
          [](const std::vector<Variable>& in) { return ag::rope(in[0], in[1].data(), RopeFrequencies{500.0}); },
          [](const std::vector<Tensor>& in) {
            return reference_rope(in[0], values(in[1]), reference_inv_freq(500.0, 8));
          }),
      // D = 16, theta 10^4: wavelengths 6.3, 20, 63, 199, 628, ... With original context 256 and
      // low/high factors 1/4, pairs 0–2 (< 64) are kept, pair 3 (64..256) interpolated, 4–7 divided.
      rope_case(
          "rope_llama3_scaled",
          [](std::mt19937_64& g) {
            return std::vector<Variable>{param(g, {2, 3, 1, 16})};
          },
          [](const std::vector<Variable>& in) {
            return ag::rope(in[0], 300, RopeFrequencies{10000.0, RopeScaling::llama3, 8.0, 1.0, 4.0, 256.0});
          },
          [](const std::vector<Tensor>& in) {
            return reference_rope(in[0], {300, 301, 302}, reference_inv_freq(10000.0, 16, {"llama3", 8, 1, 4, 256}));
          }),
      rope_case(
          "rope_linear_scaled",
          [](std::mt19937_64& g) {
            return std::vector<Variable>{param(g, {1, 3, 2, 8})};
          },
          [](const std::vector<Variable>& in) {
            return ag::rope(in[0], 2, RopeFrequencies{10000.0, RopeScaling::linear, 4.0});
          },
          [](const std::vector<Tensor>& in) {
            return reference_rope(in[0], {2, 3, 4}, reference_inv_freq(10000.0, 8, {"linear", 4}));
          }),
  };
}

TRIDENT_OP_CASES(make_rope_cases);

}  // namespace
}  // namespace trident::testing
