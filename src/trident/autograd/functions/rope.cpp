#include "trident/autograd/functions/rope.h"

#include "trident/autograd/function.h"
#include "trident/ops/rope.h"

namespace trident::autograd {

Variable rope(const Variable& x, std::int64_t position_offset, const RopeFrequencies& freq) {
  return make_result(ops::rope(x.data(), position_offset, freq), {x}, "rope",
                     [position_offset, freq](const GradContext& ctx) {
                       return std::vector<Tensor>{ops::rope_backward(ctx.grad(), position_offset, freq)};
                     });
}

Variable rope(const Variable& x, const Tensor& positions, const RopeFrequencies& freq) {
  return make_result(ops::rope(x.data(), positions, freq), {x}, "rope", [positions, freq](const GradContext& ctx) {
    return std::vector<Tensor>{ops::rope_backward(ctx.grad(), positions, freq)};
  });
}

}  // namespace trident::autograd
