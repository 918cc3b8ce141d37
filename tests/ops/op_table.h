// The op test table: one entry per op configuration, shared by every backend.
//
// Each OpCase says how to build random inputs, how to run the op through
// autograd, and how to compute the expected output naively in f64. The driver
// (op_table_test.cpp) runs, for every case:
//   * GradCheck: f64 inputs, loss = sum(out * R) for a random R, analytic
//     gradients against central finite differences for every input that
//     requires grad;
//   * Reference: the op in each listed dtype against the f64 reference computed
//     on the same (rounded) inputs, relative error ‖out − ref‖ / ‖ref‖ ≤ tol;
// and a coverage test fails unless every differentiable op in the registry has
// a gradient check and every op a reference check.
//
// Add cases from a cases_<family>.cpp file with TRIDENT_OP_CASES.
#pragma once

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "trident/autograd/variable.h"
#include "trident/ops/registry.h"

namespace trident::testing {

using autograd::Variable;

struct OpCase {
  std::string name;  // unique, [A-Za-z0-9_]
  ops::Op op;
  // Random inputs as f64 (integer inputs such as ids keep their integer dtype).
  // Mark the inputs to differentiate with requires_grad.
  std::function<std::vector<Variable>(std::mt19937_64&)> make_inputs;
  // Runs the op; inputs arrive already converted to the dtype under test.
  std::function<Variable(const std::vector<Variable>&)> forward;
  // Expected output in f64, from f64 inputs.
  std::function<Tensor(const std::vector<Tensor>&)> reference;
  // dtypes for the reference check and their relative-error bounds.
  std::vector<std::pair<DType, double>> dtypes = {{DType::f64, 1e-12}, {DType::f32, 1e-5}};
  bool gradcheck = true;
  double grad_rtol = 1e-5;
  double grad_atol = 1e-7;
  double fd_step = 1e-6;
};

std::vector<OpCase>& op_cases();

struct OpCaseRegistrar {
  explicit OpCaseRegistrar(std::vector<OpCase> (*make)()) {
    for (auto& c : make()) op_cases().push_back(std::move(c));
  }
};

#define TRIDENT_OP_CASES_CAT2(a, b) a##b
#define TRIDENT_OP_CASES_CAT(a, b) TRIDENT_OP_CASES_CAT2(a, b)
// Usage: TRIDENT_OP_CASES(make_norm_cases) where `std::vector<OpCase> make_norm_cases()`.
#define TRIDENT_OP_CASES(fn) \
  static ::trident::testing::OpCaseRegistrar TRIDENT_OP_CASES_CAT(op_case_registrar_, __LINE__)(&fn)

// --- helpers for writing cases ---
// A random f64 tensor with entries uniform in [lo, hi).
Tensor random_tensor(std::mt19937_64& gen, Shape shape, double lo = -1.0, double hi = 1.0);
// A random integer tensor (i64) with entries in [0, bound).
Tensor random_ids(std::mt19937_64& gen, Shape shape, std::int64_t bound, DType dtype = DType::i64);
Variable param(std::mt19937_64& gen, Shape shape, double lo = -1.0, double hi = 1.0);  // requires grad
Variable constant(Tensor t);                                                         // no grad
// Host f64 copies for references.
std::vector<double> values(const Tensor& t);
Tensor tensor_from(const std::vector<double>& v, Shape shape);

}  // namespace trident::testing
