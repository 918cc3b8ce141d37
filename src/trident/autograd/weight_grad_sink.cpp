// WeightGradSink: ops adding their weight gradients straight into a leaf's .grad
// (see function.h).
#include "trident/autograd/function.h"

#include <utility>

#include "trident/autograd/variable_impl.h"
#include "trident/core/memory.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/matmul.h"

namespace trident::autograd {

namespace {
std::shared_ptr<VariableImpl> leaf_of(const Variable& weight) {
  if (!weight.defined() || !weight.requires_grad()) return nullptr;
  const std::shared_ptr<VariableImpl>& impl = weight.impl();
  if (!impl->grad_fn) return impl;
  std::shared_ptr<VariableImpl> source = impl->cast_of.lock();
  return source && source->requires_grad && !source->grad_fn ? source : nullptr;
}
}  // namespace

WeightGradSink WeightGradSink::of(const Variable& weight) {
  WeightGradSink sink;
  sink.leaf_ = leaf_of(weight);
  return sink;
}

Variable WeightGradSink::edge() const {
  std::shared_ptr<VariableImpl> leaf = leaf_.lock();
  TRIDENT_CHECK(leaf, "WeightGradSink::edge: the sink is empty");
  return Variable::from_impl(std::move(leaf));
}

std::shared_ptr<VariableImpl> WeightGradSink::live_leaf() const {
  std::shared_ptr<VariableImpl> leaf = leaf_.lock();
  TRIDENT_CHECK(leaf, "WeightGradSink: the parameter was destroyed before its backward ran");
  return leaf;
}

Tensor& WeightGradSink::buffer(bool* fresh) const {
  const std::shared_ptr<VariableImpl> leaf = live_leaf();
  *fresh = std::exchange(leaf->grad_stale, false) || !leaf->grad.defined();
  if (!leaf->grad.defined()) {
    MemoryCategoryScope scope(MemoryCategory::gradients);
    leaf->grad = Tensor::empty(leaf->data.shape(), leaf->data.dtype(), leaf->data.device());
  }
  leaf->grad_written_in_place = true;
  return leaf->grad;  // the leaf outlives the backward that calls this (its AccumulateGrad is still due)
}

bool WeightGradSink::writes_from(const Tensor& computed) const {
  const std::shared_ptr<VariableImpl> leaf = live_leaf();
  // An installed buffer may differ from the data (set_grad checks only the shape).
  const Tensor& target = leaf->grad.defined() ? leaf->grad : leaf->data;
  const DType want = target.dtype(), dtype = computed.dtype();
  return target.device() == computed.device() &&
         (want == dtype || (want == DType::f32 && (dtype == DType::bf16 || dtype == DType::f16)));
}

void WeightGradSink::add_product(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) const {
  if (!writes_from(a)) {
    add(ops::matmul(a, b, trans_a, trans_b));  // no GEMM writes this pair of dtypes
    return;
  }
  bool fresh = false;
  Tensor& g = buffer(&fresh);
  ops::matmul_into(a, b, g, trans_a, trans_b, 1.0, fresh ? 0.0 : 1.0);
}

void WeightGradSink::add(const Tensor& g) const {
  bool fresh = false;
  Tensor& dst = buffer(&fresh);
  Tensor src = g.dtype() == dst.dtype() ? g : ops::cast(g, dst.dtype());
  if (src.device() != dst.device()) src = src.to(dst.device());
  if (fresh) {
    dst.copy_from(src);
  } else {
    ops::add_(dst, src);
  }
}

}  // namespace trident::autograd
