// Op-table cases for the matmul family: every transpose combination, batched,
// a 2-D operand shared over the batch (on either side), and the linear layer
// with and without bias. References are naive triple loops in f64.
#include "op_table.h"
#include "trident/autograd/autograd.h"

namespace trident::testing {
namespace {

namespace ag = trident::autograd;
using ops::Op;

// Element (r, c) of matrix `batch` of a row-major stack of rows×cols matrices
// (a 2-D tensor is one matrix shared by every batch entry).
struct Matrices {
  std::vector<double> v;
  std::int64_t count, rows, cols;
  explicit Matrices(const Tensor& t)
      : v(values(t)), count(t.shape().outer(t.rank() - 2)), rows(t.size(-2)), cols(t.size(-1)) {}
  double at(std::int64_t batch, std::int64_t r, std::int64_t c) const {
    const std::int64_t b = count == 1 ? 0 : batch;
    return v[static_cast<std::size_t>((b * rows + r) * cols + c)];
  }
};

Tensor reference_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const Matrices A(a), B(b);
  const std::int64_t m = ta ? A.cols : A.rows, k = ta ? A.rows : A.cols, n = tb ? B.rows : B.cols;
  const Tensor& batched = a.rank() >= b.rank() ? a : b;
  std::vector<std::int64_t> dims(batched.shape().begin(), batched.shape().end() - 2);
  const std::int64_t batch = Shape(dims).numel();
  dims.push_back(m);
  dims.push_back(n);
  std::vector<double> out;
  for (std::int64_t p = 0; p < batch; ++p) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t q = 0; q < k; ++q) s += (ta ? A.at(p, q, i) : A.at(p, i, q)) * (tb ? B.at(p, j, q) : B.at(p, q, j));
        out.push_back(s);
      }
    }
  }
  return tensor_from(out, Shape(dims));
}

Tensor reference_linear(const std::vector<Tensor>& in) {
  const Tensor& x = in[0];
  const auto xv = values(x), wv = values(in[1]);
  const std::int64_t fan_in = in[1].size(1), fan_out = in[1].size(0), rows = x.numel() / fan_in;
  std::vector<double> bv(static_cast<std::size_t>(fan_out), 0.0);
  if (in.size() > 2) bv = values(in[2]);
  std::vector<double> out;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < fan_out; ++o) {
      double s = bv[static_cast<std::size_t>(o)];
      for (std::int64_t i = 0; i < fan_in; ++i) {
        s += xv[static_cast<std::size_t>(r * fan_in + i)] * wv[static_cast<std::size_t>(o * fan_in + i)];
      }
      out.push_back(s);
    }
  }
  std::vector<std::int64_t> dims(x.shape().begin(), x.shape().end() - 1);
  dims.push_back(fan_out);
  return tensor_from(out, Shape(dims));
}

OpCase matmul_case(std::string name, Shape a, Shape b, bool ta, bool tb) {
  OpCase c{std::move(name), Op::matmul,
           [a, b](std::mt19937_64& g) { return std::vector<Variable>{param(g, a), param(g, b)}; },
           [ta, tb](const std::vector<Variable>& in) { return ag::matmul(in[0], in[1], ta, tb); },
           [ta, tb](const std::vector<Tensor>& in) { return reference_matmul(in[0], in[1], ta, tb); }};
  c.dtypes.push_back({DType::bf16, 1e-2});
  return c;
}

std::vector<OpCase> make_matmul_cases() {
  std::vector<OpCase> cases;
  // Odd sizes so no dimension hides a transposition error (M=5, K=7, N=4).
  cases.push_back(matmul_case("matmul_nn", {5, 7}, {7, 4}, false, false));
  cases.back().dtypes.push_back({DType::f16, 1e-2});
  cases.push_back(matmul_case("matmul_nt", {5, 7}, {4, 7}, false, true));
  cases.push_back(matmul_case("matmul_tn", {7, 5}, {7, 4}, true, false));
  cases.push_back(matmul_case("matmul_tt", {7, 5}, {4, 7}, true, true));
  cases.push_back(matmul_case("matmul_batched", {2, 3, 5, 4}, {2, 3, 4, 6}, false, false));
  cases.push_back(matmul_case("matmul_batched_tt", {3, 4, 5}, {3, 6, 4}, true, true));
  cases.push_back(matmul_case("matmul_batched_nt", {3, 5, 4}, {3, 6, 4}, false, true));
  // A weight shared over the batch: its gradient sums over the batch (folded
  // into one GEMM when A is untransposed, accumulated per entry otherwise).
  cases.push_back(matmul_case("matmul_broadcast_b", {2, 3, 5, 4}, {4, 6}, false, false));
  cases.push_back(matmul_case("matmul_broadcast_b_nt", {3, 5, 4}, {6, 4}, false, true));
  cases.push_back(matmul_case("matmul_broadcast_b_tn", {3, 4, 5}, {4, 6}, true, false));
  cases.push_back(matmul_case("matmul_broadcast_b_tt", {3, 4, 5}, {6, 4}, true, true));
  cases.push_back(matmul_case("matmul_broadcast_a", {5, 4}, {3, 4, 6}, false, false));
  cases.push_back(matmul_case("matmul_broadcast_a_tt", {4, 5}, {2, 3, 6, 4}, true, true));

  OpCase with_bias{"linear_bias", Op::linear,
                   [](std::mt19937_64& g) { return std::vector<Variable>{param(g, {2, 3, 5}), param(g, {4, 5}), param(g, {4})}; },
                   [](const std::vector<Variable>& in) { return ag::linear(in[0], in[1], in[2]); }, reference_linear};
  with_bias.dtypes.push_back({DType::bf16, 1e-2});
  with_bias.dtypes.push_back({DType::f16, 1e-2});
  cases.push_back(with_bias);
  OpCase no_bias{"linear_no_bias", Op::linear,
                 [](std::mt19937_64& g) { return std::vector<Variable>{param(g, {7, 5}), param(g, {3, 5})}; },
                 [](const std::vector<Variable>& in) { return ag::linear(in[0], in[1]); }, reference_linear};
  no_bias.dtypes.push_back({DType::bf16, 1e-2});
  cases.push_back(no_bias);
  // A frozen weight (no gradient) with a trainable bias, and a single 1-D input row.
  OpCase frozen{"linear_frozen_weight_1d", Op::linear,
                [](std::mt19937_64& g) {
                  return std::vector<Variable>{param(g, {6}), constant(random_tensor(g, {5, 6})), param(g, {5})};
                },
                [](const std::vector<Variable>& in) { return ag::linear(in[0], in[1], in[2]); }, reference_linear};
  cases.push_back(frozen);
  return cases;
}

TRIDENT_OP_CASES(make_matmul_cases);

}  // namespace
}  // namespace trident::testing
