#include "trident/autograd/functions/activation.h"

#include "trident/autograd/function.h"
#include "trident/ops/activation.h"

namespace trident::autograd {

using Grads = std::vector<Tensor>;

namespace {
// A unary activation whose backward needs only the input.
template <Tensor (*Forward)(const Tensor&), Tensor (*Backward)(const Tensor&, const Tensor&)>
Variable unary(const Variable& x, std::string_view name) {
  return make_result(Forward(x.data()), {x}, name,
                     [xd = x.data()](const GradContext& ctx) { return Grads{Backward(ctx.grad(), xd)}; });
}
}  // namespace

Variable gelu_tanh(const Variable& x) { return unary<ops::gelu_tanh, ops::gelu_tanh_backward>(x, "gelu_tanh"); }
Variable gelu(const Variable& x) { return unary<ops::gelu, ops::gelu_backward>(x, "gelu"); }
Variable silu(const Variable& x) { return unary<ops::silu, ops::silu_backward>(x, "silu"); }

Variable tanh(const Variable& x) {
  Tensor y = ops::tanh(x.data());
  // The backward needs only the output: dx = dy (1 - y^2).
  return make_result(y, {x}, "tanh", [y](const GradContext& ctx) { return Grads{ops::tanh_backward(ctx.grad(), y)}; });
}

Variable swiglu(const Variable& gate, const Variable& up) {
  return make_result(ops::swiglu(gate.data(), up.data()), {gate, up}, "swiglu",
                     [gd = gate.data(), ud = up.data()](const GradContext& ctx) {
                       ops::SwigluGrads g = ops::swiglu_backward(ctx.grad(), gd, ud);
                       return Grads{ctx.needs(0) ? g.dgate : Tensor(), ctx.needs(1) ? g.dup : Tensor()};
                     });
}

Variable bias_gelu_tanh(const Variable& x, const Variable& bias) {
  return make_result(ops::bias_gelu_tanh(x.data(), bias.data()), {x, bias}, "bias_gelu_tanh",
                     [xd = x.data(), bd = bias.data()](const GradContext& ctx) {
                       ops::BiasGeluGrads g = ops::bias_gelu_tanh_backward(ctx.grad(), xd, bd);
                       return Grads{ctx.needs(0) ? g.dx : Tensor(), ctx.needs(1) ? g.dbias : Tensor()};
                     });
}

}  // namespace trident::autograd
