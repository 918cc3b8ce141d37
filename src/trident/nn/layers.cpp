#include "trident/nn/layers.h"

#include <algorithm>
#include <cstring>

#include "trident/autograd/autograd.h"
#include "trident/autograd/function.h"
#include "trident/ops/embedding.h"

namespace trident::nn {

namespace ag = trident::autograd;

Variable compute_view(const Parameter& p, const ForwardContext& ctx) {
  TRIDENT_CHECK(p.var.defined(), "parameter '{}' used before initialize()", p.name);
  return ag::cast_cached(p.var, ctx.compute_dtype);
}

std::int64_t padded_vocab_size(std::int64_t vocab, int tp_size, std::int64_t divisible_by) {
  TRIDENT_CHECK(divisible_by >= 1 && tp_size >= 1, "padded_vocab_size: divisible_by={} and tp_size={} must be >= 1",
                divisible_by, tp_size);
  const std::int64_t multiple = divisible_by * static_cast<std::int64_t>(tp_size);
  return (vocab + multiple - 1) / multiple * multiple;
}

Variable enter_tp_region(const Variable& x, const TensorParallel& tp) {
  if (!tp.active()) return x;
  return tp.sequence_parallel ? parallel::gather_from_sp(x, tp.group) : parallel::copy_to_tp(x, tp.group);
}

Variable exit_tp_region(const Variable& x, const TensorParallel& tp) {
  if (!tp.active()) return x;
  return tp.sequence_parallel ? parallel::reduce_scatter_to_sp(x, tp.group) : parallel::reduce_from_tp(x, tp.group);
}

Variable replicated_view(const Parameter& p, const TensorParallel& tp, const ForwardContext& ctx) {
  TRIDENT_CHECK(p.var.defined(), "parameter '{}' used before initialize()", p.name);
  // copy_to_tp: identity forward, all-reduce of the (master-dtype) gradient backward.
  if (tp.sequence_split()) return ag::cast(parallel::copy_to_tp(p.var, tp.group), ctx.compute_dtype);
  return compute_view(p, ctx);
}

ForwardContext sequence_context(const ForwardContext& ctx, const TensorParallel& tp, std::int64_t local_len) {
  if (!tp.sequence_split()) return ctx;
  ForwardContext out = ctx;
  out.seq_offset = tp.rank() * local_len;
  out.seq_global = local_len * tp.size();
  return out;
}

LinearOptions with_parallel(LinearOptions options, LinearParallel parallel) {
  options.parallel = parallel;
  return options;
}

Linear::Linear(std::string prefix, const LinearOptions& options, const TensorParallel& tp)
    : Module(std::move(prefix)), options_(options), tp_(tp) {
  TRIDENT_CHECK(options.in_features > 0 && options.out_features > 0, "Linear '{}': sizes must be positive, got {}x{}",
                this->prefix(), options.in_features, options.out_features);
  TRIDENT_CHECK(!options.gather_output || (options.parallel == LinearParallel::column && options.out_segments.size() <= 1),
                "Linear '{}': gather_output needs a column-parallel layer with one output segment", this->prefix());
  const bool out_in = options.layout == WeightLayout::out_in;
  const Shape w = out_in ? Shape{options.out_features, options.in_features}
                         : Shape{options.in_features, options.out_features};
  const Init w_init{InitKind::normal, options.init_std}, b_init{InitKind::zeros, 0};
  const Shape b{options.out_features};
  const int r = tp.rank(), t = tp.size();
  const bool split = tp.active() && options.parallel != LinearParallel::none;
  if (!split) {
    weight_ = &add_parameter("weight", w, w_init, true);
    if (options.bias) bias_ = &add_parameter("bias", b, b_init, false);
  } else if (options.parallel == LinearParallel::column) {
    const std::size_t out_dim = out_in ? 0 : 1;
    weight_ = &add_parameter("weight", w, ShardSpec::split(w, out_dim, r, t, options.out_segments), w_init, true);
    if (options.bias) bias_ = &add_parameter("bias", b, ShardSpec::split(b, 0, r, t, options.out_segments), b_init, false);
  } else {
    const std::size_t in_dim = out_in ? 1 : 0;
    weight_ = &add_parameter("weight", w, ShardSpec::split(w, in_dim, r, t), w_init, true);
    if (options.bias) bias_ = &add_parameter("bias", b, b_init, false);  // replicated, added after the reduction
  }
}

Variable Linear::local(const Variable& x, const ForwardContext& ctx, bool with_bias) const {
  const Shape& ws = weight_->local_shape();
  const std::int64_t in = options_.layout == WeightLayout::out_in ? ws[1] : ws[0];
  TRIDENT_CHECK(x.shape().rank() >= 1 && x.shape().last() == in,
                "Linear '{}': input of shape {} does not end in {} features{}", prefix(), x.shape(), in,
                in == options_.in_features ? "" : " (this rank's share of the input)");
  // A layer that is not split lives in the replicated region (BERT's head transform): under sequence
  // parallelism it sees this rank's tokens only, so its gradients are partial sums over the group.
  const bool replicated = options_.parallel == LinearParallel::none;
  Variable w = replicated ? replicated_view(*weight_, tp_, ctx) : compute_view(*weight_, ctx);
  Variable b = with_bias && bias_ ? (replicated ? replicated_view(*bias_, tp_, ctx) : compute_view(*bias_, ctx))
                                  : Variable();
  if (options_.layout == WeightLayout::out_in) return ag::linear(x, w, b);
  Variable y = ag::matmul(x, w, false, false);
  return b.defined() ? ag::bias_add(y, b) : y;
}

Variable Linear::bias_view(const ForwardContext& ctx) const {
  TRIDENT_CHECK(bias_ != nullptr, "Linear '{}' has no bias", prefix());
  return compute_view(*bias_, ctx);
}

Variable Linear::forward(const Variable& x, const ForwardContext& ctx) const {
  if (!tp_.active() || options_.parallel == LinearParallel::none) return local(x, ctx, true);
  if (options_.parallel == LinearParallel::column) return forward_in_region(enter_tp_region(x, tp_), ctx);
  Variable y = exit_tp_region(local(x, ctx, false), tp_);
  return bias_ ? ag::bias_add(y, replicated_view(*bias_, tp_, ctx)) : y;
}

Variable Linear::forward_in_region(const Variable& x, const ForwardContext& ctx, bool with_bias) const {
  TRIDENT_CHECK(options_.parallel != LinearParallel::row, "Linear '{}': a row-parallel layer has no input region",
                prefix());
  TRIDENT_CHECK(with_bias || !options_.gather_output, "Linear '{}': a gathered output needs its bias added here",
                prefix());
  Variable y = local(x, ctx, with_bias);
  if (options_.gather_output && tp_.active()) y = parallel::gather_from_tp(y, tp_.group);
  return y;
}

namespace {

// Lookup of the rows [begin, begin + rows) of a vocabulary of `vocab` ids: ids
// of other ranks give zero vectors and contribute no gradient. An id outside
// [0, vocab) is an error, as in the unsharded lookup: it would otherwise read
// as a padding row's or no rank's zeros.
Variable shard_lookup(const std::string& name, const Variable& weight, const Tensor& ids, std::int64_t begin,
                      std::int64_t vocab) {
  const std::int64_t rows = weight.shape()[0];
  const Device device = weight.data().device();
  // The ids are few (one per token): the shard mask is computed on the host.
  const Tensor global = ids.to(Device::cpu()).to(DType::i64);
  Tensor local = Tensor::empty(ids.shape(), DType::i64);
  const auto g = global.span<std::int64_t>();
  auto l = local.span<std::int64_t>();
  std::vector<std::uint8_t> mine(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    TRIDENT_CHECK(g[i] >= 0 && g[i] < vocab, "embedding '{}': id {} at flat position {} of ids {} is outside the "
                  "vocabulary [0, {})", name, g[i], i, ids.shape(), vocab);
    mine[i] = g[i] >= begin && g[i] < begin + rows;
    l[i] = mine[i] ? g[i] - begin : 0;
  }
  // Zeroes the rows of a [..., D] tensor whose id lies outside the shard (on a
  // GPU through a host copy: TP embedding lookups are not yet a CUDA kernel).
  auto zero_foreign = [mine](Tensor t) {
    if (std::all_of(mine.begin(), mine.end(), [](std::uint8_t m) { return m != 0; })) return t;
    Tensor host = t.to(Device::cpu());  // t itself on the CPU
    const std::int64_t d = host.size(-1);
    const std::size_t row_bytes = static_cast<std::size_t>(d) * dtype_size(host.dtype());
    auto* base = static_cast<char*>(host.raw_data());
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (!mine[i]) std::memset(base + i * row_bytes, 0, row_bytes);
    if (!t.device().is_cpu()) t.copy_from(host);
    return t;
  };
  Tensor out = zero_foreign(ops::embedding(weight.data(), local.to(device)));
  return autograd::make_result(
      out, {weight}, "vocab_parallel_embedding", [local, rows, zero_foreign](const autograd::GradContext& ctx) {
        return std::vector<Tensor>{
            ops::embedding_backward(zero_foreign(ctx.grad().clone()), local.to(ctx.grad().device()), rows)};
      });
}

}  // namespace

Embedding::Embedding(std::string prefix, std::int64_t num_embeddings, std::int64_t dim, double init_std,
                     const TensorParallel& tp, bool vocab_parallel, std::int64_t vocab_divisible_by)
    : Module(std::move(prefix)), tp_(tp), num_embeddings_(num_embeddings) {
  const Shape w{num_embeddings, dim};
  const Init init{InitKind::normal, init_std};
  const std::int64_t padded = vocab_parallel ? padded_vocab_size(num_embeddings, tp.size(), vocab_divisible_by) : 0;
  vocab_parallel_ = vocab_parallel && (tp.active() || padded != num_embeddings);
  if (!vocab_parallel_) {
    weight_ = &add_parameter("weight", w, init, true);
    return;
  }
  row_begin_ = padded / tp.size() * tp.rank();
  weight_ = &add_parameter("weight", w, ShardSpec::padded_rows(w, padded, tp.rank(), tp.size()), init, true);
}

Variable Embedding::forward(const Tensor& ids, const ForwardContext& ctx) const {
  if (!vocab_parallel_) {
    if (tp_.sequence_split()) return ag::embedding(replicated_view(*weight_, tp_, ctx), ids);
    return ag::embedding(compute_view(*weight_, ctx), ids);
  }
  // One rank holds every row: the padded table is looked up directly (the ids index real rows only).
  if (!tp_.active()) return ag::embedding(compute_view(*weight_, ctx), ids, num_embeddings_);
  return exit_tp_region(shard_lookup(prefix(), compute_view(*weight_, ctx), ids, row_begin_, num_embeddings_), tp_);
}

LayerNorm::LayerNorm(std::string prefix, std::int64_t dim, double eps, bool bias, const TensorParallel& tp)
    : Layer(std::move(prefix)), eps_(eps), tp_(tp) {
  weight_ = &add_parameter("weight", Shape{dim}, Init{InitKind::ones, 0}, false);
  if (bias) bias_ = &add_parameter("bias", Shape{dim}, Init{InitKind::zeros, 0}, false);
}

Variable LayerNorm::forward(const Variable& x, const ForwardContext& ctx) const {
  return ag::layer_norm(x, replicated_view(*weight_, tp_, ctx), bias_ ? replicated_view(*bias_, tp_, ctx) : Variable(),
                        eps_);
}

RMSNorm::RMSNorm(std::string prefix, std::int64_t dim, double eps, const TensorParallel& tp)
    : Layer(std::move(prefix)), eps_(eps), tp_(tp) {
  weight_ = &add_parameter("weight", Shape{dim}, Init{InitKind::ones, 0}, false);
}

Variable RMSNorm::forward(const Variable& x, const ForwardContext& ctx) const {
  return ag::rms_norm(x, replicated_view(*weight_, tp_, ctx), eps_);
}

Variable dropout(const Variable& x, double p, const std::string& site, const ForwardContext& ctx) {
  if (!ctx.training || p <= 0.0) return x;
  const std::vector<ForwardContext::Piece> pieces = ctx.batch_pieces(x.shape());
  if (pieces.size() == 1) return ag::dropout(x, p, ctx.dropout_rng(site), pieces[0].slice);
  // Context parallelism: the local rows hold two runs of the sequence; each is dropped at its positions.
  std::vector<Variable> parts;
  for (const ForwardContext::Piece& piece : pieces) {
    parts.push_back(ag::dropout(ag::slice(x, 1, piece.local_begin, piece.local_begin + piece.length), p,
                                ctx.dropout_rng(site), piece.slice));
  }
  return ag::concat(parts, 1);
}

Tensor ForwardContext::global_positions(std::int64_t from, std::int64_t count) const {
  if (context.active()) return context.positions(from, count);
  Tensor p = Tensor::empty({count}, DType::i64);
  auto* d = p.data<std::int64_t>();
  for (std::int64_t i = 0; i < count; ++i) d[i] = position_offset + from + i;
  return p;
}

std::vector<ForwardContext::Piece> ForwardContext::batch_pieces(const Shape& local) const {
  if (!context.active() || local.rank() < 2) return {Piece{0, local.rank() > 1 ? local[1] : 0, batch_slice(local)}};
  // Under sequence parallelism too, the local rows are [seq_offset, seq_offset + T) of the cp-local sequence.
  const std::int64_t from = seq_global > 0 ? seq_offset : 0;
  std::vector<Piece> pieces;
  for (const auto& run : context.runs(from, local[1])) {
    Shape part = local;
    part[1] = run.length;
    GlobalSlice slice = batch_slice(part);
    slice.global_shape[1] = context.seq_len;
    slice.offsets[1] = run.global_begin;
    pieces.push_back({run.local_begin - from, run.length, std::move(slice)});
  }
  return pieces;
}

}  // namespace trident::nn
