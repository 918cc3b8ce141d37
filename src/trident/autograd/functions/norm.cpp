#include "trident/autograd/functions/norm.h"

#include "trident/autograd/function.h"
#include "trident/ops/norm.h"

namespace trident::autograd {

using Grads = std::vector<Tensor>;

Variable layer_norm(const Variable& x, const Variable& weight, const Variable& bias, double eps) {
  const Tensor bias_data = bias.defined() ? bias.data() : Tensor();
  ops::LayerNormOutput out = ops::layer_norm(x.data(), weight.data(), bias_data, eps);
  return make_result(std::move(out.y), {x, weight, bias}, "layer_norm",
                     [xd = x.data(), wd = weight.data(), mean = out.mean, rstd = out.rstd](const GradContext& ctx) {
                       ops::LayerNormGrads g = ops::layer_norm_backward(ctx.grad(), xd, wd, mean, rstd);
                       return Grads{ctx.needs(0) ? g.dx : Tensor(), ctx.needs(1) ? g.dweight : Tensor(),
                                    ctx.needs(2) ? g.dbias : Tensor()};
                     });
}

Variable rms_norm(const Variable& x, const Variable& weight, double eps) {
  ops::RmsNormOutput out = ops::rms_norm(x.data(), weight.data(), eps);
  return make_result(std::move(out.y), {x, weight}, "rms_norm",
                     [xd = x.data(), wd = weight.data(), rstd = out.rstd](const GradContext& ctx) {
                       ops::RmsNormGrads g = ops::rms_norm_backward(ctx.grad(), xd, wd, rstd);
                       return Grads{ctx.needs(0) ? g.dx : Tensor(), ctx.needs(1) ? g.dweight : Tensor()};
                     });
}

}  // namespace trident::autograd
