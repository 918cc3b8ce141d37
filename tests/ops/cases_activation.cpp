// Op-table cases for the activation family: GELU (tanh and exact), SiLU, SwiGLU,
// the fused bias + GELU-tanh, and tanh.
#include <cmath>
#include <numbers>

#include "op_table.h"
#include "trident/autograd/autograd.h"

namespace trident::testing {
namespace {

namespace ag = trident::autograd;
using ops::Op;

double ref_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double ref_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }
double ref_silu(double x) { return x / (1.0 + std::exp(-x)); }
// The definition, not libm's tanh (inputs stay within |x| <= 6, far from overflow).
double ref_tanh(double x) { return (std::exp(x) - std::exp(-x)) / (std::exp(x) + std::exp(-x)); }

Tensor map(const Tensor& x, double (*f)(double)) {
  auto v = values(x);
  for (double& e : v) e = f(e);
  return tensor_from(v, x.shape());
}

OpCase unary_case(std::string name, Op op, Shape shape, Variable (*fn)(const Variable&), double (*ref)(double)) {
  OpCase c{std::move(name), op,
           // Wide enough to reach both tails, where the exp-based forms saturate.
           [shape](std::mt19937_64& g) { return std::vector<Variable>{param(g, shape, -6.0, 6.0)}; },
           [fn](const std::vector<Variable>& in) { return fn(in[0]); },
           [ref](const std::vector<Tensor>& in) { return map(in[0], ref); }};
  c.dtypes.push_back({DType::bf16, 1e-2});
  c.dtypes.push_back({DType::f16, 2e-3});
  return c;
}

std::vector<OpCase> make_activation_cases() {
  std::vector<OpCase> cases;
  cases.push_back(unary_case("gelu_tanh", Op::gelu_tanh, {5, 7}, ag::gelu_tanh, ref_gelu_tanh));
  cases.push_back(unary_case("gelu_tanh_3d", Op::gelu_tanh, {3, 2, 19}, ag::gelu_tanh, ref_gelu_tanh));
  cases.push_back(unary_case("gelu", Op::gelu, {4, 9}, ag::gelu, ref_gelu));
  cases.push_back(unary_case("silu", Op::silu, {6, 5}, ag::silu, ref_silu));
  cases.push_back(unary_case("tanh", Op::tanh, {4, 11}, ag::tanh, ref_tanh));
  // BERT's pooler: tanh of a [batch, hidden] slab, values mostly in the linear range.
  OpCase tanh_small = unary_case("tanh_3d", Op::tanh, {2, 3, 17}, ag::tanh, ref_tanh);
  tanh_small.make_inputs = [](std::mt19937_64& g) { return std::vector<Variable>{param(g, {2, 3, 17}, -0.5, 0.5)}; };
  cases.push_back(tanh_small);

  OpCase swiglu{"swiglu", Op::swiglu,
                [](std::mt19937_64& g) {
                  return std::vector<Variable>{param(g, {3, 13}, -5.0, 5.0), param(g, {3, 13}, -2.0, 2.0)};
                },
                [](const std::vector<Variable>& in) { return ag::swiglu(in[0], in[1]); },
                [](const std::vector<Tensor>& in) {
                  auto gate = values(in[0]), up = values(in[1]);
                  for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = ref_silu(gate[i]) * up[i];
                  return tensor_from(gate, in[0].shape());
                }};
  swiglu.dtypes.push_back({DType::bf16, 1e-2});
  swiglu.dtypes.push_back({DType::f16, 2e-3});
  cases.push_back(swiglu);

  OpCase bias_gelu{"bias_gelu_tanh", Op::bias_gelu_tanh,
                   [](std::mt19937_64& g) {
                     return std::vector<Variable>{param(g, {2, 3, 11}, -4.0, 4.0), param(g, {11})};
                   },
                   [](const std::vector<Variable>& in) { return ag::bias_gelu_tanh(in[0], in[1]); },
                   [](const std::vector<Tensor>& in) {
                     auto x = values(in[0]), b = values(in[1]);
                     for (std::size_t i = 0; i < x.size(); ++i) x[i] = ref_gelu_tanh(x[i] + b[i % b.size()]);
                     return tensor_from(x, in[0].shape());
                   }};
  bias_gelu.dtypes.push_back({DType::bf16, 1e-2});
  bias_gelu.dtypes.push_back({DType::f16, 2e-3});
  cases.push_back(bias_gelu);
  return cases;
}

TRIDENT_OP_CASES(make_activation_cases);

}  // namespace
}  // namespace trident::testing
