#include "trident/autograd/functions/rope.h"

#include "trident/autograd/function.h"
#include "trident/ops/rope.h"

namespace trident::autograd {

Variable rope(const Variable& x, std::int64_t position_offset, double theta) {
  return make_result(ops::rope(x.data(), position_offset, theta), {x}, "rope",
                     [position_offset, theta](const GradContext& ctx) {
                       return std::vector<Tensor>{ops::rope_backward(ctx.grad(), position_offset, theta)};
                     });
}

Variable rope(const Variable& x, const Tensor& positions, double theta) {
  return make_result(ops::rope(x.data(), positions, theta), {x}, "rope", [positions, theta](const GradContext& ctx) {
    return std::vector<Tensor>{ops::rope_backward(ctx.grad(), positions, theta)};
  });
}

}  // namespace trident::autograd
