#include "trident/autograd/functions/dropout.h"

#include "trident/autograd/function.h"
#include "trident/ops/dropout.h"

namespace trident::autograd {

Variable dropout(const Variable& x, double p, const CounterRng& rng, const GlobalSlice& slice) {
  Tensor y = ops::dropout(x.data(), p, rng, slice);  // validates p and slice even when p == 0
  if (p == 0.0) return x;
  return make_result(std::move(y), {x}, "dropout", [p, rng, slice](const GradContext& ctx) {
    return std::vector<Tensor>{ops::dropout_backward(ctx.grad(), p, rng, slice)};
  });
}

}  // namespace trident::autograd
