#include "trident/autograd/functions/elementwise.h"

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string_view>

#include "trident/autograd/function.h"
#include "trident/autograd/variable_impl.h"
#include "trident/core/memory.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/reduce.h"
#include "trident/ops/shape.h"

namespace trident::autograd {

using Grads = std::vector<Tensor>;

Variable add(const Variable& a, const Variable& b) {
  return make_result(ops::add(a.data(), b.data()), {a, b}, "add", [](const GradContext& ctx) {
    return Grads{ctx.needs(0) ? ctx.grad() : Tensor(), ctx.needs(1) ? ctx.grad() : Tensor()};
  });
}

Variable sub(const Variable& a, const Variable& b) {
  return make_result(ops::sub(a.data(), b.data()), {a, b}, "sub", [](const GradContext& ctx) {
    return Grads{ctx.needs(0) ? ctx.grad() : Tensor(), ctx.needs(1) ? ops::scale(ctx.grad(), -1.0) : Tensor()};
  });
}

Variable mul(const Variable& a, const Variable& b) {
  Tensor ad = a.data(), bd = b.data();
  return make_result(ops::mul(ad, bd), {a, b}, "mul", [ad, bd](const GradContext& ctx) {
    return Grads{ctx.needs(0) ? ops::mul(ctx.grad(), bd) : Tensor(), ctx.needs(1) ? ops::mul(ctx.grad(), ad) : Tensor()};
  });
}

Variable scale(const Variable& a, double s) {
  return make_result(ops::scale(a.data(), s), {a}, "scale",
                     [s](const GradContext& ctx) { return Grads{ops::scale(ctx.grad(), s)}; });
}

Variable bias_add(const Variable& x, const Variable& bias) {
  return make_result(ops::bias_add(x.data(), bias.data()), {x, bias}, "bias_add", [](const GradContext& ctx) {
    return Grads{ctx.needs(0) ? ctx.grad() : Tensor(), ctx.needs(1) ? ops::sum_to_last_dim(ctx.grad()) : Tensor()};
  });
}

namespace {
// The cast node of `x` whose output holds `converted` (x's data in another dtype).
Variable record_cast(const Variable& x, Tensor converted) {
  const DType from = x.dtype();
  Variable y = make_result(std::move(converted), {x}, "cast",
                           [from](const GradContext& ctx) { return Grads{ops::cast(ctx.grad(), from)}; });
  // A copy of a leaf (a master weight in the compute dtype): ops with a
  // WeightGradSink add its gradient straight into the leaf's .grad.
  if (y.requires_grad() && x.is_leaf()) y.impl()->cast_of = x.impl();
  return y;
}

bool verify_compute_copies() {
  static const bool on = [] {
    const char* v = std::getenv("TRIDENT_VERIFY_COMPUTE_COPIES");
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
  }();
  return on;
}
}  // namespace

Variable cast(const Variable& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return record_cast(x, ops::cast(x.data(), dtype));
}

Variable cast_cached(const Variable& x, DType dtype) {
  if (x.dtype() == dtype || !x.is_leaf()) return cast(x, dtype);
  Tensor copy = x.compute_copy();
  if (copy.defined() && copy.dtype() == dtype) {
    if (verify_compute_copies()) {
      const Tensor fresh = ops::cast(x.data(), dtype).to(Device::cpu()), kept = copy.to(Device::cpu());
      TRIDENT_CHECK(std::memcmp(fresh.raw_data(), kept.raw_data(), fresh.nbytes()) == 0,
                    "the {} copy of '{}' is stale: its data was written without Variable::mark_data_changed()",
                    dtype, x.name());
    }
  } else {
    MemoryCategoryScope scope(MemoryCategory::parameters);
    copy = ops::cast(x.data(), dtype);
    x.set_compute_copy(copy);
  }
  return record_cast(x, copy);
}

Variable sum(const Variable& x) {
  const Shape shape = x.shape();
  return make_result(ops::sum(x.data()), {x}, "sum", [shape](const GradContext& ctx) {
    return Grads{Tensor::full(shape, ctx.grad().item(), ctx.grad().dtype(), ctx.grad().device())};
  });
}

Variable mean(const Variable& x) {
  const Shape shape = x.shape();
  return make_result(ops::mean(x.data()), {x}, "mean", [shape](const GradContext& ctx) {
    const double g = ctx.grad().item() / static_cast<double>(shape.numel());
    return Grads{Tensor::full(shape, g, ctx.grad().dtype(), ctx.grad().device())};
  });
}

Variable reshape(const Variable& x, Shape shape) {
  const Shape in_shape = x.shape();
  return make_result(ops::reshape(x.data(), std::move(shape)), {x}, "reshape",
                     [in_shape](const GradContext& ctx) { return Grads{ctx.grad().view(in_shape)}; });
}

Variable permute(const Variable& x, const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> inverse(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) inverse[x.shape().axis(dims[i])] = static_cast<std::int64_t>(i);
  return make_result(ops::permute(x.data(), dims), {x}, "permute",
                     [inverse](const GradContext& ctx) { return Grads{ops::permute(ctx.grad(), inverse)}; });
}

Variable transpose(const Variable& x, std::int64_t dim0, std::int64_t dim1) {
  std::vector<std::int64_t> dims(x.shape().rank());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[x.shape().axis(dim0)], dims[x.shape().axis(dim1)]);
  return permute(x, dims);
}

std::vector<Variable> split(const Variable& x, const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  return make_results(ops::split(x.data(), sizes, dim), {x}, "split",
                      [dim](const GradContext& ctx) { return Grads{ops::concat(ctx.grad_outputs, dim)}; });
}

Variable concat(const std::vector<Variable>& xs, std::int64_t dim) {
  std::vector<Tensor> data;
  std::vector<std::int64_t> sizes;
  for (const Variable& v : xs) {
    data.push_back(v.data());
    sizes.push_back(v.data().rank() ? v.shape()[v.shape().axis(dim)] : 0);
  }
  return make_result(ops::concat(data, dim), xs, "concat",
                     [sizes, dim](const GradContext& ctx) { return ops::split(ctx.grad(), sizes, dim); });
}

Variable slice(const Variable& x, std::int64_t dim, std::int64_t start, std::int64_t end) {
  const Shape shape = x.shape();
  return make_result(ops::slice(x.data(), dim, start, end), {x}, "slice", [shape, dim, start](const GradContext& ctx) {
    return Grads{ops::slice_backward(ctx.grad(), shape, dim, start)};
  });
}

}  // namespace trident::autograd
