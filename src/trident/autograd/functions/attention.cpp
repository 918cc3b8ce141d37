#include "trident/autograd/functions/attention.h"

#include "trident/autograd/function.h"

namespace trident::autograd {

Variable attention(const Variable& q, const Variable& k, const Variable& v, const ops::AttentionOptions& options) {
  auto [out, lse] = ops::attention(q.data(), k.data(), v.data(), options);
  return make_result(out, {q, k, v}, "attention",
                     [qd = q.data(), kd = k.data(), vd = v.data(), out, lse, options](const GradContext& ctx) {
                       auto [dq, dk, dv] = ops::attention_backward(qd, kd, vd, out, lse, ctx.grad(), options);
                       return std::vector<Tensor>{dq, dk, dv};
                     });
}

}  // namespace trident::autograd
