// Differentiable elementwise, reduction and shape functions (see ops/ for the
// forward semantics and argument rules).
#pragma once

#include <vector>

#include "trident/autograd/variable.h"

namespace trident::autograd {

Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable scale(const Variable& a, double s);
Variable bias_add(const Variable& x, const Variable& bias);
// Converts dtype; the gradient is converted back (mixed precision's master → compute copy).
Variable cast(const Variable& x, DType dtype);
// cast() of a leaf (a master weight) whose converted data is kept with the
// leaf and reused until the data changes (Variable::mark_data_changed): one
// conversion per optimiser step instead of one per micro-batch and per
// recomputation — none at all when the optimiser writes the copy in its
// update. TRIDENT_VERIFY_COMPUTE_COPIES=1 re-converts on every reuse and fails,
// naming the variable, if a write went unannounced (the tests run with it).
Variable cast_cached(const Variable& x, DType dtype);

Variable sum(const Variable& x);
Variable mean(const Variable& x);

Variable reshape(const Variable& x, Shape shape);
Variable permute(const Variable& x, const std::vector<std::int64_t>& dims);
Variable transpose(const Variable& x, std::int64_t dim0, std::int64_t dim1);
std::vector<Variable> split(const Variable& x, const std::vector<std::int64_t>& sizes, std::int64_t dim);
Variable concat(const std::vector<Variable>& xs, std::int64_t dim);
Variable slice(const Variable& x, std::int64_t dim, std::int64_t start, std::int64_t end);

}  // namespace trident::autograd
