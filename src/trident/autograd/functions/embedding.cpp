#include "trident/autograd/functions/embedding.h"

#include "trident/autograd/function.h"
#include "trident/ops/embedding.h"

namespace trident::autograd {

Variable embedding(const Variable& weight, const Tensor& ids) {
  const std::int64_t vocab = weight.data().rank() == 2 ? weight.shape()[0] : 0;
  return make_result(ops::embedding(weight.data(), ids), {weight}, "embedding", [ids, vocab](const GradContext& ctx) {
    return std::vector<Tensor>{ops::embedding_backward(ctx.grad(), ids, vocab)};
  });
}

}  // namespace trident::autograd
