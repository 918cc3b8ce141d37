#include "trident/autograd/functions/embedding.h"

#include "trident/autograd/function.h"
#include "trident/ops/embedding.h"

namespace trident::autograd {

Variable embedding(const Variable& weight, const Tensor& ids, std::int64_t valid) {
  const std::int64_t vocab = weight.data().rank() == 2 ? weight.shape()[0] : 0;
  const WeightGradSink sink = WeightGradSink::of(weight);
  return make_result(ops::embedding(weight.data(), ids, valid), {sink ? sink.edge() : weight}, "embedding",
                     [ids, vocab, sink](const GradContext& ctx) {
                       const Tensor& dout = ctx.grad();
                       if (!sink) return std::vector<Tensor>{ops::embedding_backward(dout, ids, vocab)};
                       if (sink.writes_from(dout)) {
                         // Only the rows of this batch's ids are touched, in the master dtype.
                         bool fresh = false;
                         Tensor& dweight = sink.buffer(&fresh);
                         ops::embedding_backward_into(dout, ids, dweight, !fresh);
                       } else {
                         sink.add(ops::embedding_backward(dout, ids, vocab));
                       }
                       return std::vector<Tensor>{Tensor()};
                     });
}

}  // namespace trident::autograd
