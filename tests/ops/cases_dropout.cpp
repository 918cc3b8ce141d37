// Op-table cases for dropout: the whole tensor, and a shard placed in a larger
// global tensor (the reference computes the global indices on its own).
#include "op_table.h"
#include "trident/autograd/autograd.h"

namespace trident::testing {
namespace {

namespace ag = trident::autograd;
using ops::Op;

const CounterRng kRng(1234, "test/dropout");

// Element (i, j) of a local [rows, cols] tensor at (row0, col0) in a [*, global_cols] tensor.
Tensor reference_dropout_2d(const Tensor& x, double p, std::int64_t row0, std::int64_t col0, std::int64_t global_cols) {
  auto v = values(x);
  const std::int64_t rows = x.shape()[0], cols = x.shape()[1];
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const auto g = static_cast<std::uint64_t>((row0 + i) * global_cols + col0 + j);
      double& e = v[static_cast<std::size_t>(i * cols + j)];
      e = kRng.uniform(g) < p ? 0.0 : e / (1.0 - p);
    }
  }
  return tensor_from(v, x.shape());
}

std::vector<OpCase> make_dropout_cases() {
  std::vector<OpCase> cases;
  OpCase whole{"dropout", Op::dropout, [](std::mt19937_64& g) { return std::vector<Variable>{param(g, {6, 23})}; },
               [](const std::vector<Variable>& in) { return ag::dropout(in[0], 0.3, kRng); },
               [](const std::vector<Tensor>& in) { return reference_dropout_2d(in[0], 0.3, 0, 0, 23); }};
  whole.dtypes.push_back({DType::bf16, 1e-2});
  whole.dtypes.push_back({DType::f16, 2e-3});
  cases.push_back(whole);

  // A [5, 7] shard at offsets (3, 9) of a [10, 30] tensor.
  const GlobalSlice slice{Shape{10, 30}, {3, 9}};
  OpCase shard{"dropout_shard", Op::dropout, [](std::mt19937_64& g) { return std::vector<Variable>{param(g, {5, 7})}; },
               [slice](const std::vector<Variable>& in) { return ag::dropout(in[0], 0.45, kRng, slice); },
               [](const std::vector<Tensor>& in) { return reference_dropout_2d(in[0], 0.45, 3, 9, 30); }};
  shard.dtypes.push_back({DType::bf16, 1e-2});
  shard.dtypes.push_back({DType::f16, 2e-3});
  cases.push_back(shard);
  return cases;
}

TRIDENT_OP_CASES(make_dropout_cases);

}  // namespace
}  // namespace trident::testing
