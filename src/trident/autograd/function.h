// Defining differentiable functions, built in or user-defined.
//
// A function computes its outputs with ops:: on plain tensors, then calls
// make_result(s) with a backward closure. The closure captures whatever it
// needs (saved tensors) and returns one gradient per input (undefined when
// that input needs none — check ctx.needs(i) to skip work). If grad mode is off
// or no input requires a gradient, no node is recorded.
//
//   Variable my_square(const Variable& x) {
//     Tensor y = ops::mul(x.data(), x.data());
//     return make_result(y, {x}, "my_square", [xd = x.data()](const GradContext& ctx) {
//       return std::vector<Tensor>{ops::scale(ops::mul(ctx.grad(0), xd), 2.0)};
//     });
//   }
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trident/autograd/variable.h"

namespace trident::autograd {

struct GradContext {
  // Gradients of the outputs; the engine fills missing ones with zeros.
  std::vector<Tensor> grad_outputs;
  std::vector<bool> needs_input_grad;
  const Tensor& grad(std::size_t i = 0) const { return grad_outputs.at(i); }
  bool needs(std::size_t i) const { return needs_input_grad.at(i); }
};

using BackwardFn = std::function<std::vector<Tensor>(const GradContext&)>;

struct Edge {
  std::shared_ptr<Node> node;  // null: input needs no gradient
  int input_nr = 0;            // which output of `node` this edge feeds
};

// A recorded operation: its input edges and its backward closure.
class Node {
 public:
  Node(std::string name, std::vector<Edge> next_edges, BackwardFn backward, std::vector<Tensor> output_templates);
  virtual ~Node() = default;

  const std::string& name() const noexcept { return name_; }
  const std::vector<Edge>& next_edges() const noexcept { return next_edges_; }
  std::size_t num_outputs() const noexcept { return output_shapes_.size(); }
  // Computes input gradients from output gradients (missing ones zero-filled).
  virtual std::vector<Tensor> apply(std::vector<Tensor> grad_outputs);
  // Drops the saved tensors (after a backward without retain_graph).
  virtual void release();
  // Recording order; backward runs later-recorded nodes first.
  std::uint64_t sequence_nr() const noexcept { return sequence_nr_; }

 protected:
  std::string name_;
  std::vector<Edge> next_edges_;
  BackwardFn backward_;
  std::vector<Shape> output_shapes_;
  std::vector<DType> output_dtypes_;
  std::vector<Device> output_devices_;
  bool released_ = false;
  std::uint64_t sequence_nr_ = 0;
};

// Records `outputs` as produced from `inputs` by a function with this backward.
// When on, make_result(s) fails for a name that is not in the op registry
// (ops/registry.h) nor "checkpoint": every op the tests record must be listed.
// Off by default (tests of the engine record made-up names); also turned on by
// the environment variable TRIDENT_VERIFY_OP_NAMES=1.
void set_verify_op_names(bool on) noexcept;
bool verify_op_names() noexcept;
Variable make_result(Tensor output, const std::vector<Variable>& inputs, std::string_view name, BackwardFn backward);
std::vector<Variable> make_results(std::vector<Tensor> outputs, const std::vector<Variable>& inputs,
                                   std::string_view name, BackwardFn backward);

// True when a function applied to `inputs` must record a node.
bool any_requires_grad(const std::vector<Variable>& inputs);

// Gradient-accumulation fusion (Megatron-LM's --gradient-accumulation-fusion).
//
// When a weight operand is a leaf that requires a gradient, or the cast of one
// to the compute dtype (mixed precision: a bf16 copy of an f32 master weight),
// the op consuming it may add its weight gradient straight into the leaf's
// .grad — a GEMM writing f32 with beta = 1, a scatter-add of embedding rows —
// instead of returning it for the engine to cast to the master dtype, sum with
// the weight's other gradients and add into .grad: up to three passes over
// every weight gradient fewer per backward, and one rounding (in the master
// dtype) instead of two.
//
// The op records edge() as its input in place of the weight (so the gradient
// bypasses the cast node), and its backward returns no gradient for it but
// calls add_product / add. The leaf's AccumulateGrad still runs once, after
// every consumer, and fires the grad-ready hooks as before.
class WeightGradSink {
 public:
  WeightGradSink() = default;
  // The sink of `weight`; empty (false) when `weight` is neither a leaf
  // requiring a gradient nor the cast of one.
  static WeightGradSink of(const Variable& weight);
  explicit operator bool() const noexcept { return !leaf_.expired(); }
  // The input to record in place of the weight: the leaf itself.
  Variable edge() const;
  // .grad (+)= op(a)·op(b), computed into the gradient's dtype directly where
  // the GEMM can (same dtype, or f32 from bf16/f16 operands).
  void add_product(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false) const;
  // .grad (+)= g, converted to the gradient's dtype.
  void add(const Tensor& g) const;
  // Whether a kernel computing like `computed` can write the gradient
  // directly: the gradient is on its device and of its dtype, or f32 for
  // bf16/f16 (else compute, then add()).
  bool writes_from(const Tensor& computed) const;
  // For ops that write the gradient themselves: the leaf's .grad, allocated
  // when the leaf has none yet. *fresh = true then, and when zero_grad() left
  // old values in it: the op must overwrite a fresh buffer completely and add
  // into one that is not.
  Tensor& buffer(bool* fresh) const;

 private:
  std::shared_ptr<VariableImpl> live_leaf() const;  // the leaf, or an error naming the sink
  std::weak_ptr<VariableImpl> leaf_;
};

}  // namespace trident::autograd
