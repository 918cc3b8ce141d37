// Driver of the op test table (see op_table.h).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "op_table.h"
#include "trident/autograd/autograd.h"
#include "trident/core/rng.h"

namespace trident::testing {
namespace {

// Every op the table records must be listed in the op registry: make_result
// fails for any other name from here on.
[[maybe_unused]] const bool kVerifyOpNames = [] {
  autograd::set_verify_op_names(true);
  return true;
}();

std::uint64_t seed_of(const std::string& name) { return stream_id(name); }

// Inputs converted to `dtype` (floating ones), keeping requires_grad.
std::vector<Variable> convert_inputs(const std::vector<Variable>& inputs, DType dtype) {
  std::vector<Variable> out;
  for (const Variable& v : inputs) {
    if (is_floating(v.dtype())) {
      out.emplace_back(v.data().to(dtype), v.requires_grad());
    } else {
      out.emplace_back(v.data(), false);
    }
  }
  return out;
}

double relative_error(const std::vector<double>& out, const std::vector<double>& ref, bool* has_nan) {
  double num = 0, den = 0;
  *has_nan = false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i]) != std::isnan(ref[i])) *has_nan = true;
    if (std::isnan(ref[i])) continue;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

class OpTable : public ::testing::TestWithParam<std::size_t> {
 protected:
  const OpCase& op_case() const { return op_cases()[GetParam()]; }
};

TEST_P(OpTable, GradCheck) {
  const OpCase& c = op_case();
  if (!c.gradcheck || !ops::op_info(c.op).differentiable) GTEST_SKIP() << "no gradient check for this case";
  std::mt19937_64 gen(seed_of(c.name));
  std::vector<Variable> inputs = c.make_inputs(gen);
  Variable out = c.forward(inputs);
  ASSERT_EQ(out.dtype(), DType::f64) << "op output must stay f64 in the gradient check";
  Tensor r = random_tensor(gen, out.shape());
  Variable loss = autograd::sum(autograd::mul(out, Variable(r, false)));
  loss.backward();

  auto objective = [&]() {
    autograd::NoGradGuard no_grad;
    Tensor o = c.forward(inputs).data();
    double s = 0;
    auto ov = o.span<double>();
    auto rv = r.span<double>();
    for (std::size_t i = 0; i < ov.size(); ++i) s += ov[i] * rv[i];
    return s;
  };

  int checked_inputs = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    ++checked_inputs;
    ASSERT_TRUE(inputs[i].grad().defined()) << "input " << i << " received no gradient";
    auto x = inputs[i].data().span<double>();
    auto g = inputs[i].grad().span<double>();
    std::vector<std::size_t> positions;
    if (x.size() <= 256) {
      for (std::size_t k = 0; k < x.size(); ++k) positions.push_back(k);
    } else {
      std::uniform_int_distribution<std::size_t> pick(0, x.size() - 1);
      for (int k = 0; k < 128; ++k) positions.push_back(pick(gen));
    }
    for (std::size_t k : positions) {
      const double saved = x[k];
      x[k] = saved + c.fd_step;
      const double fp = objective();
      x[k] = saved - c.fd_step;
      const double fm = objective();
      x[k] = saved;
      const double numeric = (fp - fm) / (2 * c.fd_step);
      const double analytic = g[k];
      const double tol = c.grad_atol + c.grad_rtol * std::max(std::fabs(numeric), std::fabs(analytic));
      ASSERT_NEAR(analytic, numeric, tol) << c.name << ": input " << i << " element " << k;
    }
  }
  EXPECT_GT(checked_inputs, 0) << "case marks no input as requiring grad";
}

TEST_P(OpTable, Reference) {
  const OpCase& c = op_case();
  ASSERT_TRUE(c.reference) << "case has no reference";
  for (auto [dtype, tol] : c.dtypes) {
    std::mt19937_64 gen(seed_of(c.name) ^ 0x5eed);
    std::vector<Variable> inputs = c.make_inputs(gen);
    std::vector<Variable> typed = convert_inputs(inputs, dtype);
    // The reference sees the inputs rounded to `dtype`, so only the op's own error is measured.
    std::vector<Tensor> ref_inputs;
    for (const Variable& v : typed) ref_inputs.push_back(is_floating(v.dtype()) ? v.data().to(DType::f64) : v.data());
    Tensor expected = c.reference(ref_inputs);
    Variable out;
    {
      autograd::NoGradGuard no_grad;
      out = c.forward(typed);
    }
    ASSERT_EQ(out.shape(), expected.shape()) << c.name << " in " << dtype_name(dtype);
    bool nan = false;
    const double err = relative_error(values(out.data()), values(expected), &nan);
    EXPECT_FALSE(nan) << c.name << " in " << dtype_name(dtype) << ": NaN mismatch";
    EXPECT_LE(err, tol) << c.name << " in " << dtype_name(dtype) << ": relative error " << err;
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTable, ::testing::Range<std::size_t>(0, op_cases().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& p) { return op_cases()[p.param].name; });

TEST(OpTableCoverage, EveryRegisteredOpIsTested) {
  std::set<ops::Op> graded, referenced;
  std::set<std::string> names;
  for (const OpCase& c : op_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case name " << c.name;
    if (c.gradcheck) graded.insert(c.op);
    if (c.reference) referenced.insert(c.op);
  }
  for (const ops::OpInfo& info : ops::kOps) {
    if (info.family == "parallel") continue;  // inputs on several ranks: tests/parallel and tests/nn check these
    EXPECT_TRUE(referenced.count(info.op)) << "op '" << info.name << "' has no reference case in the op test table";
    if (info.differentiable) {
      EXPECT_TRUE(graded.count(info.op)) << "differentiable op '" << info.name << "' has no gradient check";
    }
  }
}

}  // namespace
}  // namespace trident::testing
