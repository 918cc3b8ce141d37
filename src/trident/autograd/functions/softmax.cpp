#include "trident/autograd/functions/softmax.h"

#include "trident/autograd/function.h"
#include "trident/ops/softmax.h"

namespace trident::autograd {

Variable softmax(const Variable& x) {
  Tensor y = ops::softmax(x.data());
  // The backward needs only the output: dx = y * (dy - sum(dy * y)).
  return make_result(y, {x}, "softmax", [y](const GradContext& ctx) {
    return std::vector<Tensor>{ops::softmax_backward(y, ctx.grad())};
  });
}

}  // namespace trident::autograd
