#include "trident/parallel/tensor/mappings.h"

#include "trident/autograd/function.h"
#include "trident/ops/shape.h"

namespace trident::parallel {

namespace {
using Grads = std::vector<Tensor>;

Tensor all_reduced(const Tensor& x, dist::Communicator& tp) {
  Tensor out = x.clone();  // inputs may be shared with other consumers; reduce a copy
  tp.all_reduce(out, dist::CollectiveOptions{dist::ReduceOp::sum, 0, true})->wait();
  return out;
}
}  // namespace

Tensor split_last_dim(const Tensor& x, int rank, int size) {
  const std::int64_t last = x.size(-1);
  TRIDENT_CHECK(last % size == 0, "tensor parallelism: last dimension {} of {} does not divide by the group size {}",
                last, x.shape(), size);
  const std::int64_t chunk = last / size;
  return ops::slice(x, -1, rank * chunk, (rank + 1) * chunk);
}

Tensor all_gather_last_dim(const Tensor& x, dist::Communicator& tp) {
  const int n = tp.size();
  if (n == 1) return x;
  Tensor gathered = Tensor::empty({n * x.numel()}, x.dtype(), x.device());
  tp.all_gather(x.flatten(), gathered, dist::CollectiveOptions{dist::ReduceOp::sum, 0, true})->wait();
  // [n, rows, chunk] → [rows, n, chunk] → [..., n · chunk]
  const std::int64_t chunk = x.size(-1), rows = x.numel() / std::max<std::int64_t>(chunk, 1);
  Tensor t = ops::permute(gathered.view({n, rows, chunk}), {1, 0, 2});
  Shape full = x.shape();
  full[full.rank() - 1] = n * chunk;
  return t.view(full);
}

Variable copy_to_tp(const Variable& x, const TpGroup& tp) {
  return autograd::make_result(x.data(), {x}, "copy_to_tp",
                               [tp](const autograd::GradContext& ctx) { return Grads{all_reduced(ctx.grad(), *tp)}; });
}

Variable reduce_from_tp(const Variable& x, const TpGroup& tp) {
  return autograd::make_result(all_reduced(x.data(), *tp), {x}, "reduce_from_tp",
                               [](const autograd::GradContext& ctx) { return Grads{ctx.grad()}; });
}

Variable scatter_to_tp(const Variable& x, const TpGroup& tp) {
  return autograd::make_result(split_last_dim(x.data(), tp->rank(), tp->size()), {x}, "scatter_to_tp",
                               [tp](const autograd::GradContext& ctx) {
                                 return Grads{all_gather_last_dim(ctx.grad(), *tp)};
                               });
}

Variable gather_from_tp(const Variable& x, const TpGroup& tp) {
  return autograd::make_result(all_gather_last_dim(x.data(), *tp), {x}, "gather_from_tp",
                               [tp](const autograd::GradContext& ctx) {
                                 return Grads{split_last_dim(ctx.grad(), tp->rank(), tp->size())};
                               });
}

}  // namespace trident::parallel
