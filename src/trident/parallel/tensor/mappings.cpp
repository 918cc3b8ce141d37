#include "trident/parallel/tensor/mappings.h"

#include "trident/autograd/function.h"
#include "trident/ops/shape.h"

namespace trident::parallel {

namespace {
using Grads = std::vector<Tensor>;

bool trivial(const TpGroup& tp) { return !tp || tp->size() == 1; }

std::int64_t normalize_dim(const Tensor& x, std::int64_t dim) {
  const auto r = static_cast<std::int64_t>(x.rank());
  const std::int64_t d = dim < 0 ? dim + r : dim;
  TRIDENT_CHECK(d >= 0 && d < r, "sequence parallelism: dimension {} of a {} tensor", dim, x.shape());
  return d;
}

// x viewed as [outer, x.size(dim), inner].
std::int64_t outer_size(const Tensor& x, std::int64_t d) {
  std::int64_t n = 1;
  for (std::int64_t i = 0; i < d; ++i) n *= x.size(i);
  return n;
}

Tensor all_reduced(const Tensor& x, dist::Communicator& tp) {
  if (tp.size() == 1) return x;
  Tensor out = x.clone();  // inputs may be shared with other consumers; reduce a copy
  tp.all_reduce(out, dist::CollectiveOptions{dist::ReduceOp::sum, 0, true})->wait();
  return out;
}
}  // namespace

Tensor split_dim(const Tensor& x, std::int64_t dim, int rank, int size) {
  const std::int64_t d = normalize_dim(x, dim), n = x.size(d);
  TRIDENT_CHECK(n % size == 0, "tensor parallelism: dimension {} of {} ({}) does not divide by the group size {}", d,
                x.shape(), n, size);
  if (size == 1) return x;
  return ops::slice(x, d, rank * (n / size), (rank + 1) * (n / size));
}

Tensor all_gather_dim(const Tensor& x, std::int64_t dim, dist::Communicator& tp) {
  const int n = tp.size();
  if (n == 1) return x;
  const std::int64_t d = normalize_dim(x, dim);
  Tensor gathered = Tensor::empty({n * x.numel()}, x.dtype(), x.device());
  tp.all_gather(x.flatten(), gathered, dist::CollectiveOptions{dist::ReduceOp::sum, 0, true})->wait();
  Shape full = x.shape();
  full[static_cast<std::size_t>(d)] *= n;
  const std::int64_t outer = outer_size(x, d);
  if (outer == 1) return gathered.view(full);
  // [n, outer, chunk] → [outer, n, chunk]
  return ops::permute(gathered.view({n, outer, x.numel() / outer}), {1, 0, 2}).view(full);
}

Tensor reduce_scatter_dim(const Tensor& x, std::int64_t dim, dist::Communicator& tp) {
  const int n = tp.size();
  if (n == 1) return x;
  const std::int64_t d = normalize_dim(x, dim);
  TRIDENT_CHECK(x.size(d) % n == 0,
                "sequence parallelism: dimension {} of {} ({}) does not divide by the group size {}", d, x.shape(),
                x.size(d), n);
  const std::int64_t outer = outer_size(x, d);
  // Rank-major chunks: [outer, n, chunk] → [n, outer, chunk].
  Tensor chunks = outer == 1 ? x.flatten()
                             : ops::permute(x.view({outer, n, x.numel() / outer / n}), {1, 0, 2}).flatten();
  Shape part = x.shape();
  part[static_cast<std::size_t>(d)] /= n;
  Tensor out = Tensor::empty(part, x.dtype(), x.device());
  Tensor flat = out.flatten();
  tp.reduce_scatter(chunks, flat, dist::CollectiveOptions{dist::ReduceOp::sum, 0, true})->wait();
  return out;
}

Variable copy_to_tp(const Variable& x, const TpGroup& tp) {
  if (trivial(tp)) return x;
  return autograd::make_result(x.data(), {x}, "copy_to_tp",
                               [tp](const autograd::GradContext& ctx) { return Grads{all_reduced(ctx.grad(), *tp)}; });
}

Variable reduce_from_tp(const Variable& x, const TpGroup& tp) {
  if (trivial(tp)) return x;
  return autograd::make_result(all_reduced(x.data(), *tp), {x}, "reduce_from_tp",
                               [](const autograd::GradContext& ctx) { return Grads{ctx.grad()}; });
}

Variable scatter_to_tp(const Variable& x, const TpGroup& tp) {
  if (trivial(tp)) return x;
  return autograd::make_result(split_dim(x.data(), -1, tp->rank(), tp->size()), {x}, "scatter_to_tp",
                               [tp](const autograd::GradContext& ctx) {
                                 return Grads{all_gather_dim(ctx.grad(), -1, *tp)};
                               });
}

Variable gather_from_tp(const Variable& x, const TpGroup& tp) {
  if (trivial(tp)) return x;
  return autograd::make_result(all_gather_dim(x.data(), -1, *tp), {x}, "gather_from_tp",
                               [tp](const autograd::GradContext& ctx) {
                                 return Grads{split_dim(ctx.grad(), -1, tp->rank(), tp->size())};
                               });
}

Variable scatter_to_sp(const Variable& x, const TpGroup& tp, std::int64_t dim) {
  if (trivial(tp)) return x;
  return autograd::make_result(split_dim(x.data(), dim, tp->rank(), tp->size()), {x}, "scatter_to_sp",
                               [tp, dim](const autograd::GradContext& ctx) {
                                 return Grads{all_gather_dim(ctx.grad(), dim, *tp)};
                               });
}

Variable gather_from_sp(const Variable& x, const TpGroup& tp, std::int64_t dim) {
  if (trivial(tp)) return x;
  return autograd::make_result(all_gather_dim(x.data(), dim, *tp), {x}, "gather_from_sp",
                               [tp, dim](const autograd::GradContext& ctx) {
                                 return Grads{reduce_scatter_dim(ctx.grad(), dim, *tp)};
                               });
}

Variable reduce_scatter_to_sp(const Variable& x, const TpGroup& tp, std::int64_t dim) {
  if (trivial(tp)) return x;
  return autograd::make_result(reduce_scatter_dim(x.data(), dim, *tp), {x}, "reduce_scatter_to_sp",
                               [tp, dim](const autograd::GradContext& ctx) {
                                 return Grads{all_gather_dim(ctx.grad(), dim, *tp)};
                               });
}

}  // namespace trident::parallel
