// Backend consistency: every op of the registry (ops::kOps), through its public
// ops:: entry points, on CUDA against the CPU reference.
//
// Each case builds fresh random inputs on the host (seeded from its name),
// copies them to cuda:0, runs the op on both devices and compares every output
// in f64 on the host: ‖out − ref‖₂ / ‖ref‖₂ ≤ 1e-5 for f32, 1e-2 for bf16/f16,
// 1e-12 for f64, exact for integers (the looser of the case's and the output's
// dtype). A NaN in the CUDA output never passes, nor an infinity where the
// reference is finite. CUDA allocations are poisoned with NaN during the CUDA
// run, so an output element a kernel never writes shows up as NaN; inputs are
// copies of the host tensors (in-place ops update those copies).
//
// Without a GPU the comparison cases skip; what still runs is the coverage
// check (every registry op has a case), the comparator's own test and every
// case's CPU half, so a broken case is caught before a GPU ever sees it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cuda_consistency.h"
#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/rng.h"
#include "trident/core/tensor.h"
#include "trident/kernels/cuda/device.h"
#include "trident/ops/activation.h"
#include "trident/ops/attention.h"
#include "trident/ops/dropout.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/embedding.h"
#include "trident/ops/loss.h"
#include "trident/ops/matmul.h"
#include "trident/ops/norm.h"
#include "trident/ops/optimizer.h"
#include "trident/ops/reduce.h"
#include "trident/ops/registry.h"
#include "trident/ops/rope.h"
#include "trident/ops/shape.h"
#include "trident/ops/softmax.h"

namespace trident {
namespace {

using namespace consistency;

// --- comparison ---

double bound(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-5;
    case DType::bf16:
    case DType::f16:
      return 1e-2;
    default:
      return 0;  // integers: exact
  }
}

// "" when `got` matches the reference `ref` within `tol`; otherwise what differs.
std::string mismatch(const Tensor& got, const Tensor& ref, double tol, double floor = 0) {
  if (!ref.defined() || !got.defined()) {
    return ref.defined() == got.defined() ? ""
                                          : fmt::format("defined: got {}, reference {}", got.defined(), ref.defined());
  }
  if (got.shape() != ref.shape() || got.dtype() != ref.dtype()) {
    return fmt::format("got {} but the reference is {}", got.describe(), ref.describe());
  }
  const std::vector<double> g = got.to(Device::cpu()).to(DType::f64).to_vector<double>();
  const std::vector<double> r = ref.to(DType::f64).to_vector<double>();
  double num = 0, den = 0;
  std::int64_t nan = 0, wrong_inf = 0, first_bad = -1;
  for (std::size_t i = 0; i < g.size(); ++i) {
    bool bad = false;
    if (std::isnan(g[i])) {
      ++nan, bad = true;
    } else if (!std::isfinite(r[i]) || !std::isfinite(g[i])) {
      if (g[i] != r[i]) ++wrong_inf, bad = true;  // an infinity must be the reference's, sign included
    } else {
      num += (g[i] - r[i]) * (g[i] - r[i]);
      den += r[i] * r[i];
    }
    if (bad && first_bad < 0) first_bad = static_cast<std::int64_t>(i);
  }
  den = std::max(den, floor * floor * static_cast<double>(g.size()));
  const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (nan == 0 && wrong_inf == 0 && err <= tol) return "";
  std::string what = fmt::format("{}: relative error {:.3g} (bound {:.0e})", ref.describe(), err, tol);
  if (nan + wrong_inf > 0) {
    const auto i = static_cast<std::size_t>(first_bad);
    what += fmt::format(
        ", {} NaN and {} infinities where the reference differs; first at flat index {}: got {}, "
        "reference {}",
        nan, wrong_inf, first_bad, g[i], r[i]);
  }
  return what;
}

// While it lives, every new CUDA allocation starts as NaN (0xFF bytes).
struct PoisonedAllocations {
  PoisonedAllocations() { kernels::cuda::set_allocation_poison(true); }
  ~PoisonedAllocations() { kernels::cuda::set_allocation_poison(false); }
  PoisonedAllocations(const PoisonedAllocations&) = delete;
  PoisonedAllocations& operator=(const PoisonedAllocations&) = delete;
};

// Runs `c` on the CPU and on `target` (inputs copied there; cloned when it is
// the CPU too) and returns one line per mismatching output.
std::vector<std::string> compare_backends(const ConsistencyCase& c, Device target) {
  Rng gen(stream_id(c.name));
  const Tensors host = c.make_inputs(gen, c.dtype, c.shapes);
  Tensors copies;
  for (const Tensor& t : host) copies.push_back(!t.defined() ? t : target.is_cpu() ? t.clone() : t.to(target));
  const Tensors ref = c.run(host, Device::cpu());
  Tensors got;
  {
    std::optional<PoisonedAllocations> poison;
    if (target.is_cuda()) poison.emplace();
    got = c.run(copies, target);
  }
  if (got.size() != ref.size()) return {fmt::format("{} outputs, the reference has {}", got.size(), ref.size())};
  std::vector<std::string> failures;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double tol = std::max(bound(c.dtype), ref[i].defined() ? bound(ref[i].dtype()) : 0.0);
    std::string what = mismatch(got[i], ref[i], tol, c.error_floor);
    if (!what.empty()) failures.push_back(fmt::format("output {}: {}", i, what));
  }
  return failures;
}

std::string describe_inputs(const ConsistencyCase& c) {
  std::string s;
  for (const Shape& shape : c.shapes) s += (s.empty() ? "" : ", ") + shape.to_string();
  return fmt::format("{} ({} of op {}; shapes {})", c.name, dtype_name(c.dtype), ops::op_info(c.op).name, s);
}
// --- tests ---

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::cuda::initialize()) {
      GTEST_SKIP() << "no CUDA GPU here (" << kernels::cuda::describe() << "): the CPU/CUDA comparison needs one";
    }
  }
};

class CudaConsistency : public CudaTest, public ::testing::WithParamInterface<ConsistencyCase> {};

TEST_P(CudaConsistency, MatchesTheCpu) {
  const ConsistencyCase& c = GetParam();
  try {
    for (const std::string& failure : compare_backends(c, Device::cuda(0)))
      ADD_FAILURE() << describe_inputs(c) << ": " << failure;
  } catch (const Error& e) {
    FAIL() << describe_inputs(c) << " threw: " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaConsistency, ::testing::ValuesIn(consistency_cases()),
                         [](const ::testing::TestParamInfo<ConsistencyCase>& param) { return param.param.name; });

// A new op cannot skip the comparison: every registry op needs a case here.
TEST(CudaConsistencyTable, EveryRegistryOpHasACase) {
  std::set<std::string_view> covered;
  std::set<std::string> names;
  for (const ConsistencyCase& c : consistency_cases()) {
    covered.insert(ops::op_info(c.op).name);
    EXPECT_TRUE(names.insert(c.name).second) << "two cases are named " << c.name;
  }
  std::string missing;
  for (const ops::OpInfo& info : ops::kOps) {
    if (info.family == "parallel") continue;  // communication over a group: the multi-rank NCCL tests cover these
    if (!covered.contains(info.name)) missing += (missing.empty() ? "" : ", ") + std::string(info.name);
  }
  EXPECT_TRUE(missing.empty()) << "ops of ops::kOps without a CPU/CUDA consistency case in "
                                  "tests/kernels/cuda_consistency_cases.cpp: "
                               << missing;
}

// Every case's inputs and CPU run are valid, and the driver's comparison of the CPU against itself
// (on cloned inputs) passes: what a GPU run then reports is about the CUDA side.
TEST(CudaConsistencyTable, EveryCaseRunsOnTheCpu) {
  for (const ConsistencyCase& c : consistency_cases()) {
    try {
      for (const std::string& failure : compare_backends(c, Device::cpu()))
        ADD_FAILURE() << describe_inputs(c) << ": " << failure;
    } catch (const Error& e) {
      ADD_FAILURE() << describe_inputs(c) << " threw on the CPU: " << e.what();
    }
  }
}

TEST(CudaConsistencyTable, NanNeverPassesAndInfinitiesMustMatch) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const auto t = [](std::vector<double> v) {
    const auto n = static_cast<std::int64_t>(v.size());
    return Tensor::from_vector(v, {n});
  };
  EXPECT_EQ(mismatch(t({1, 2, -inf}), t({1, 2, -inf}), 0), "");
  EXPECT_EQ(mismatch(t({1, 2 + 1e-7, 0}), t({1, 2, 0}), 1e-5), "");
  EXPECT_NE(mismatch(t({1, 2.1, 0}), t({1, 2, 0}), 1e-5), "");
  EXPECT_NE(mismatch(t({1, nan, 0}), t({1, 2, 0}), 1), "");
  EXPECT_NE(mismatch(t({1, nan, 0}), t({1, nan, 0}), 1), "");
  EXPECT_NE(mismatch(t({1, inf, 0}), t({1, 2, 0}), 1), "");
  EXPECT_NE(mismatch(t({1, inf, 0}), t({1, -inf, 0}), 1), "");
  EXPECT_NE(mismatch(t({1, 2}), t({1, 2, 0}), 1), "");
  EXPECT_NE(mismatch(t({1, 2, 3}), t({1, 2, 3}).to(DType::f32), 1), "");
  // A reference that is rounding noise around zero: compared against the floor, not against itself.
  EXPECT_NE(mismatch(t({1e-7, -1e-7}), t({-1e-7, 1e-7}), 1e-5), "");
  EXPECT_EQ(mismatch(t({1e-7, -1e-7}), t({-1e-7, 1e-7}), 1e-5, 1), "");
}

// Dropout masks must match bit for bit: CPU and GPU replicas of a run drop the same elements.
using CudaDropoutMask = CudaTest;

TEST_F(CudaDropoutMask, SameSeedSameMaskBitForBit) {
  std::mt19937_64 gen(7);
  const CounterRng rng(99, "consistency/dropout_mask");
  const GlobalSlice slice{{64, 3000}, {17, 999}};
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = uniform(gen, {37, 1001}, dtype, 0.5, 1.5);  // no zeros: a zero output is a dropped element
    const Tensor x_cuda = x.to(Device::cuda(0));
    Tensors got;
    {
      PoisonedAllocations poison;
      got = {ops::dropout(x_cuda, 0.2, rng), ops::dropout(x_cuda, 0.2, rng, slice),
             ops::dropout_backward(x_cuda, 0.2, rng, slice)};
    }
    const Tensors ref = {ops::dropout(x, 0.2, rng), ops::dropout(x, 0.2, rng, slice),
                         ops::dropout_backward(x, 0.2, rng, slice)};
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const Tensor host = got[i].to(Device::cpu());
      ASSERT_TRUE(host.shape() == ref[i].shape() && host.dtype() == ref[i].dtype())
          << "got " << host.describe() << ", the CPU gives " << ref[i].describe();
      const std::vector<double> g = host.to(DType::f64).to_vector<double>(),
                                r = ref[i].to(DType::f64).to_vector<double>();
      std::int64_t mask_differs = 0;
      for (std::size_t j = 0; j < g.size(); ++j) mask_differs += (g[j] == 0) != (r[j] == 0);
      EXPECT_EQ(mask_differs, 0) << dtype_name(dtype) << " output " << i << ": elements dropped on one device only";
      EXPECT_EQ(std::memcmp(host.raw_data(), ref[i].raw_data(), ref[i].nbytes()), 0)
          << dtype_name(dtype) << " output " << i << ": kept elements are not bitwise equal";
    }
  }
}

}  // namespace
}  // namespace trident
