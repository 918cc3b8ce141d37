// Op-table cases for softmax over the last dimension, including rows with
// -inf entries (masked logits) and a row that is entirely -inf (zeros).
#include <cmath>
#include <limits>

#include "op_table.h"
#include "trident/autograd/autograd.h"

namespace trident::testing {
namespace {

namespace ag = trident::autograd;

Tensor reference_softmax(const Tensor& x) {
  const std::int64_t cols = x.shape().last();
  auto v = values(x);
  for (std::size_t r = 0; r < v.size(); r += static_cast<std::size_t>(cols)) {
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t c = 0; c < cols; ++c) mx = std::max(mx, v[r + c]);
    if (std::isinf(mx) && mx < 0) {
      for (std::int64_t c = 0; c < cols; ++c) v[r + c] = 0;
      continue;
    }
    double sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(v[r + c] - mx);
    for (std::int64_t c = 0; c < cols; ++c) v[r + c] = std::exp(v[r + c] - mx) / sum;
  }
  return tensor_from(v, x.shape());
}

OpCase softmax_case(std::string name, Shape shape, double range, bool masked) {
  OpCase c;
  c.name = std::move(name);
  c.op = ops::Op::softmax;
  c.make_inputs = [shape, range, masked](std::mt19937_64& g) {
    Variable x = param(g, shape, -range, range);
    if (masked) {
      auto v = x.data().span<double>();
      const double inf = std::numeric_limits<double>::infinity();
      const std::size_t cols = static_cast<std::size_t>(shape.last());
      for (std::size_t i = 0; i < cols; ++i) v[i] = -inf;           // row 0 entirely hidden
      for (std::size_t i = cols; i < v.size(); i += 3) v[i] = -inf;  // scattered hidden entries
    }
    return std::vector<Variable>{x};
  };
  c.forward = [](const std::vector<Variable>& in) { return ag::softmax(in[0]); };
  c.reference = [](const std::vector<Tensor>& in) { return reference_softmax(in[0]); };
  c.dtypes = {{DType::f64, 1e-12}, {DType::f32, 3e-6}, {DType::bf16, 1e-2}};
  return c;
}

std::vector<OpCase> make_softmax_cases() {
  return {softmax_case("softmax_rows", {3, 7}, 1.0, false), softmax_case("softmax_3d_wide_logits", {2, 3, 5}, 30.0, false),
          softmax_case("softmax_long_row", {2, 67}, 4.0, false), softmax_case("softmax_masked", {4, 6}, 2.0, true)};
}

TRIDENT_OP_CASES(make_softmax_cases);

}  // namespace
}  // namespace trident::testing
