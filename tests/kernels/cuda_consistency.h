// The backend-consistency case table (cuda_consistency_cases.cpp) and what the
// driver (cuda_consistency_test.cpp) needs of it: one case per (public ops::
// entry point, variant, dtype), with its inputs and a run on either device.
#pragma once

#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "trident/core/tensor.h"
#include "trident/ops/registry.h"

namespace trident::consistency {

using ops::Op;
using Tensors = std::vector<Tensor>;
using Shapes = std::vector<Shape>;
using Rng = std::mt19937_64;
// Host inputs for the case's dtype and shapes (what each shape means is the case's).
using MakeInputs = std::function<Tensors(Rng&, DType, const Shapes&)>;
// Runs the op on inputs that live on `device` and returns its outputs (in-place ops return the updated inputs).
using RunOp = std::function<Tensors(const Tensors&, Device)>;

struct ConsistencyCase {
  std::string name;  // the test's name: <entry point>[_<variant>]_<dtype>
  Op op;             // the registry op this case covers
  DType dtype;
  Shapes shapes;
  MakeInputs make_inputs;
  RunOp run;
  // Errors are relative to max(RMS of the reference, error_floor): nonzero where an output is zero in exact
  // arithmetic (the reference is then rounding noise), and set to the scale such an output would have.
  double error_floor = 0;
};

inline void PrintTo(const ConsistencyCase& c, std::ostream* os) { *os << c.name; }

// Uniform in [lo, hi) for floating dtypes (drawn in f64, rounded once), integers in [0, 100) otherwise.
Tensor uniform(Rng& gen, const Shape& shape, DType dtype, double lo = -1, double hi = 1);

// Every case, built once.
const std::vector<ConsistencyCase>& consistency_cases();

}  // namespace trident::consistency
