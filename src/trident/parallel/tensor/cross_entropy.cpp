#include "trident/parallel/tensor/cross_entropy.h"

#include <cmath>
#include <limits>

#include "trident/autograd/function.h"

namespace trident::parallel {

namespace {

std::vector<std::int64_t> target_ids(const Tensor& targets, std::int64_t rows) {
  TRIDENT_CHECK(targets.rank() == 1 && targets.size(0) == rows,
                "vocab_parallel_cross_entropy: targets {} do not match {} logit rows", targets.shape(), rows);
  TRIDENT_CHECK(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
                "vocab_parallel_cross_entropy: targets must be i32 or i64, got {}", targets.dtype());
  return targets.to(DType::i64).to_vector<std::int64_t>();
}

void all_reduce(std::vector<double>& v, dist::Communicator& tp, dist::ReduceOp op) {
  Tensor t = Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
  tp.all_reduce(t, dist::CollectiveOptions{op, 0, true})->wait();
  v = t.to_vector<double>();
}

}  // namespace

Variable vocab_parallel_cross_entropy(const Variable& logits, const Tensor& targets, std::int64_t vocab_begin,
                                      const TpGroup& tp, std::int64_t ignore_index, double normalizer) {
  TRIDENT_CHECK(logits.shape().rank() == 2, "vocab_parallel_cross_entropy: logits must be [rows, vocab slice], got {}",
                logits.shape());
  const std::int64_t N = logits.shape()[0], V = logits.shape()[1];
  const std::vector<std::int64_t> y = target_ids(targets, N);
  const Tensor z = logits.data().to(DType::f64);
  const auto zv = z.span<double>();
  // Row maxima, target logits and exponential sums, reduced over the group.
  std::vector<double> mx(static_cast<std::size_t>(N), -std::numeric_limits<double>::infinity());
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t j = 0; j < V; ++j) mx[i] = std::max(mx[i], zv[static_cast<std::size_t>(i * V + j)]);
  all_reduce(mx, *tp, dist::ReduceOp::max);
  std::vector<double> zy(static_cast<std::size_t>(N), 0.0), sum(static_cast<std::size_t>(N), 0.0);
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    const std::size_t ii = static_cast<std::size_t>(i);
    if (y[ii] == ignore_index) continue;
    ++count;
    const std::int64_t local = y[ii] - vocab_begin;
    if (local >= 0 && local < V) zy[ii] = zv[static_cast<std::size_t>(i * V + local)] - mx[ii];
    for (std::int64_t j = 0; j < V; ++j) sum[ii] += std::exp(zv[static_cast<std::size_t>(i * V + j)] - mx[ii]);
  }
  all_reduce(zy, *tp, dist::ReduceOp::sum);
  all_reduce(sum, *tp, dist::ReduceOp::sum);
  const double denom = normalizer > 0 ? normalizer : static_cast<double>(std::max<std::int64_t>(count, 1));
  double loss = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    const std::size_t ii = static_cast<std::size_t>(i);
    if (y[ii] != ignore_index) loss += std::log(sum[ii]) - zy[ii];
  }
  const DType out_dtype = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor out = Tensor::full(Shape{}, loss / denom, out_dtype);
  const DType in_dtype = logits.dtype();
  return autograd::make_result(out, {logits}, "vocab_parallel_cross_entropy",
                               [z, y, mx, sum, N, V, vocab_begin, ignore_index, denom, in_dtype](
                                   const autograd::GradContext& ctx) {
                                 const double g = ctx.grad().item() / denom;
                                 Tensor d = Tensor::zeros({N, V}, DType::f64);
                                 auto dv = d.span<double>();
                                 const auto zv2 = z.span<double>();
                                 for (std::int64_t i = 0; i < N; ++i) {
                                   const std::size_t ii = static_cast<std::size_t>(i);
                                   if (y[ii] == ignore_index) continue;
                                   for (std::int64_t j = 0; j < V; ++j) {
                                     const std::size_t k = static_cast<std::size_t>(i * V + j);
                                     dv[k] = g * std::exp(zv2[k] - mx[ii]) / sum[ii];
                                   }
                                   const std::int64_t local = y[ii] - vocab_begin;
                                   if (local >= 0 && local < V) dv[static_cast<std::size_t>(i * V + local)] -= g;
                                 }
                                 return std::vector<Tensor>{d.to(in_dtype)};
                               });
}

}  // namespace trident::parallel
