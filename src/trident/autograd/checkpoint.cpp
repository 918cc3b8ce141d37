#include "trident/autograd/checkpoint.h"

#include "trident/autograd/function.h"

namespace trident::autograd {

namespace {
// Runs hooks.enter now and hooks.exit when it goes out of scope (also on errors).
class HookScope {
 public:
  explicit HookScope(const SegmentHooks& hooks) : hooks_(hooks) {
    if (hooks_.enter) hooks_.enter();
  }
  ~HookScope() {
    if (hooks_.exit) hooks_.exit();
  }
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;

 private:
  const SegmentHooks& hooks_;
};
}  // namespace

std::vector<Variable> checkpoint(const SegmentFn& fn, const std::vector<Variable>& inputs, const SegmentHooks& hooks) {
  std::vector<Tensor> outputs;
  {
    HookScope scope(hooks);
    NoGradGuard no_grad;
    for (const Variable& v : fn(inputs)) outputs.push_back(v.data());
  }
  if (!grad_enabled()) {
    std::vector<Variable> plain;
    for (Tensor& t : outputs) plain.emplace_back(std::move(t), false);
    return plain;
  }
  // Parameters inside fn may require grad even when no input does, so always record a node
  // when grad mode is on; its inputs are the segment inputs (possibly none requiring grad).
  std::vector<Tensor> saved;
  std::vector<bool> input_requires;
  for (const Variable& v : inputs) {
    saved.push_back(v.data());
    input_requires.push_back(v.requires_grad());
  }
  BackwardFn recompute = [fn, saved, input_requires, hooks](const GradContext& ctx) {
    HookScope scope(hooks);
    std::vector<Variable> fresh;
    for (std::size_t i = 0; i < saved.size(); ++i) fresh.emplace_back(saved[i], input_requires[i]);
    std::vector<Variable> outs;
    {
      EnableGradGuard grad_on;
      outs = fn(fresh);
    }
    std::vector<Variable> roots;
    std::vector<Tensor> grads;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      if (outs[i].requires_grad()) {
        roots.push_back(outs[i]);
        grads.push_back(ctx.grad(i));
      }
    }
    if (!roots.empty()) backward(roots, grads, false);
    std::vector<Tensor> input_grads;
    for (std::size_t i = 0; i < fresh.size(); ++i) input_grads.push_back(ctx.needs(i) ? fresh[i].grad() : Tensor());
    return input_grads;
  };
  // A sentinel input that always requires grad makes the node record even when
  // no segment input does (the parameters inside still need their gradients).
  std::vector<Variable> edge_inputs = inputs;
  static thread_local Variable anchor(Tensor::zeros({1}), true);
  edge_inputs.push_back(anchor);
  BackwardFn wrapped = [recompute](const GradContext& ctx) {
    GradContext inner = ctx;
    inner.needs_input_grad.pop_back();
    std::vector<Tensor> g = recompute(inner);
    g.emplace_back();  // no gradient for the anchor
    return g;
  };
  return make_results(std::move(outputs), edge_inputs, "checkpoint", std::move(wrapped));
}

}  // namespace trident::autograd
