#include "trident/nn/transformer.h"

#include "trident/autograd/autograd.h"
#include "trident/ops/shape.h"
#include "trident/parallel/context/attention.h"

namespace trident::nn {

namespace ag = trident::autograd;

namespace {

void check_heads(const SelfAttentionOptions& o, int tp) {
  TRIDENT_CHECK(o.n_head > 0 && o.n_kv_head > 0 && o.d_model % o.n_head == 0 && o.n_head % o.n_kv_head == 0,
                "attention: d_model={} needs whole heads and n_head={} a multiple of n_kv_head={}", o.d_model,
                o.n_head, o.n_kv_head);
  TRIDENT_CHECK(!o.fused_qkv || o.n_kv_head == o.n_head, "attention: a fused QKV projection has no grouped-query "
                "attention (n_kv_head={} but n_head={})", o.n_kv_head, o.n_head);
  TRIDENT_CHECK(!o.rope || o.head_dim() % 2 == 0, "model: RoPE needs an even head dimension, got {}", o.head_dim());
  TRIDENT_CHECK(o.window >= 0, "attention: the sliding window must be 0 (none) or positive, got {}", o.window);
  if (tp <= 1) return;
  TRIDENT_CHECK(o.n_head % tp == 0,
                "dist.tensor_parallel_size={} must divide the number of attention heads n_head={}", tp, o.n_head);
  TRIDENT_CHECK(o.n_kv_head % tp == 0,
                "dist.tensor_parallel_size={} must divide the number of key/value heads n_kv_head={} (each rank "
                "holds whole query groups)",
                tp, o.n_kv_head);
}

}  // namespace

SelfAttention::SelfAttention(std::string prefix, SelfAttentionOptions options, std::int64_t layer_index,
                             const TensorParallel& tp, const ContextParallel& cp)
    : Layer(std::move(prefix)), options_(std::move(options)), layer_(layer_index), tp_(tp), cp_(cp) {
  const SelfAttentionOptions& o = options_;
  check_heads(o, tp.size());
  const std::int64_t D = o.d_model, hd = o.head_dim();
  if (o.fused_qkv) {
    // Fused [q | k | v]; each is split by heads separately.
    LinearOptions qkv{D, 3 * D, o.qkv_bias, o.layout, o.init_std};
    qkv.out_segments = {D, D, D};
    qkv_ = &add_module(std::make_unique<ColumnParallelLinear>(child_prefix(o.qkv), qkv, tp));
  } else {
    const LinearOptions q{D, o.n_head * hd, o.qkv_bias, o.layout, o.init_std};
    const LinearOptions kv{D, o.n_kv_head * hd, o.qkv_bias, o.layout, o.init_std};
    q_ = &add_module(std::make_unique<ColumnParallelLinear>(child_prefix(o.q), q, tp));
    k_ = &add_module(std::make_unique<ColumnParallelLinear>(child_prefix(o.k), kv, tp));
    v_ = &add_module(std::make_unique<ColumnParallelLinear>(child_prefix(o.v), kv, tp));
  }
  out_ = &add_module(std::make_unique<RowParallelLinear>(
      child_prefix(o.out), LinearOptions{o.n_head * hd, D, o.out_bias, o.layout, o.out_init_std}, tp));
}

Tensor document_positions(const ForwardContext& ctx, std::int64_t from, std::int64_t count) {
  if (!ctx.document_positions || !ctx.document_starts.defined()) return {};
  TRIDENT_CHECK(ctx.position_offset == 0 && !ctx.cache, "positions restarting at each document need no KV cache");
  const Tensor starts = ctx.document_starts.to(Device::cpu());
  const std::int64_t B = starts.size(0), T = starts.size(1);
  const std::int64_t local = ctx.context.active() ? ctx.context.local_len() : T;
  TRIDENT_CHECK(from >= 0 && from + count <= local, "document positions of tokens [{}, {}) of a sequence of {}", from,
                from + count, local);
  // Each token's global position (its place in the whole sequence under context parallelism), less its
  // document's start.
  const Tensor global = ctx.context.active() ? ctx.context.positions(from, count) : Tensor();
  Tensor positions = Tensor::empty({B, count}, DType::i64);
  const auto* s = starts.data<std::int32_t>();
  auto* p = positions.data<std::int64_t>();
  for (std::int64_t t = 0; t < count; ++t) {
    const std::int64_t g = global.defined() ? global.data<std::int64_t>()[t] : from + t;
    for (std::int64_t b = 0; b < B; ++b) p[b * count + t] = g - s[b * T + g];
  }
  return positions;
}

Variable SelfAttention::forward(const Variable& x_in, const ForwardContext& ctx) const {
  const Variable x = enter_tp_region(x_in, tp_);  // [B, T, D]: the whole sequence
  const std::int64_t B = x.shape()[0], T = x.shape()[1], hd = options_.head_dim();
  const std::int64_t H = options_.n_head / tp_.size(), Hkv = options_.n_kv_head / tp_.size();  // this rank's heads
  Variable q, k, v;
  if (qkv_) {
    auto parts = ag::split(qkv_->forward_in_region(x, ctx), {H * hd, H * hd, H * hd}, -1);
    q = ag::reshape(parts[0], {B, T, H, hd});
    k = ag::reshape(parts[1], {B, T, H, hd});
    v = ag::reshape(parts[2], {B, T, H, hd});
  } else {
    q = ag::reshape(q_->forward_in_region(x, ctx), {B, T, H, hd});
    k = ag::reshape(k_->forward_in_region(x, ctx), {B, T, Hkv, hd});
    v = ag::reshape(v_->forward_in_region(x, ctx), {B, T, Hkv, hd});
  }
  if (options_.rope) {
    if (const Tensor positions = document_positions(ctx, 0, T); positions.defined()) {
      q = ag::rope(q, positions, *options_.rope);
      k = ag::rope(k, positions, *options_.rope);
    } else if (ctx.context.active()) {
      const Tensor global = ctx.global_positions(0, T);
      q = ag::rope(q, global, *options_.rope);
      k = ag::rope(k, global, *options_.rope);
    } else {
      q = ag::rope(q, ctx.position_offset, *options_.rope);
      k = ag::rope(k, ctx.position_offset, *options_.rope);
    }
  }
  TRIDENT_CHECK(!cp_.active() || !ctx.cache, "generation with context parallelism is not supported ({})", prefix());
  TRIDENT_CHECK(cp_.size() == ctx.context.size && (!cp_.active() || ctx.context.local_len() == T),
                "{}: the context-parallel group has {} rank(s) but the forward context splits the sequence over {} (of "
                "{} tokens, {} here)",
                prefix(), cp_.size(), ctx.context.size, ctx.context.seq_len, T);
  if (ctx.cache) {
    // Generation: prepend the cached keys/values (no gradients flow here).
    TRIDENT_CHECK(static_cast<std::size_t>(layer_) < ctx.cache->keys.size(),
                  "KV cache has {} layers, but layer {} uses it", ctx.cache->keys.size(), layer_);
    auto& ck = ctx.cache->keys[static_cast<std::size_t>(layer_)];
    auto& cv = ctx.cache->values[static_cast<std::size_t>(layer_)];
    // The new tokens continue the cached ones (the causal mask is aligned to the end): their positions
    // (RoPE, learned positions) must start where the cache ends.
    const std::int64_t cached = ck.defined() ? ck.shape()[1] : 0;
    TRIDENT_CHECK(ctx.position_offset == cached,
                  "KV cache of layer {} holds {} tokens, but the new tokens start at position_offset {}", layer_,
                  cached, ctx.position_offset);
    Tensor keys = ck.defined() ? ops::concat({ck, k.data()}, 1) : k.data();
    Tensor values = cv.defined() ? ops::concat({cv, v.data()}, 1) : v.data();
    ck = keys;
    cv = values;
    ctx.cache->length = keys.shape()[1];
    k = Variable(keys, false);
    v = Variable(values, false);
  }
  ops::AttentionOptions attention;
  attention.causal = options_.causal;
  attention.window = options_.window;
  const std::int64_t whole = cp_.active() ? ctx.context.seq_len : T;  // the masks cover the whole sequence
  if (ctx.key_mask.defined()) {
    TRIDENT_CHECK(!ctx.cache, "attention: a key mask (padding) with a KV cache is not supported");
    TRIDENT_CHECK(ctx.key_mask.shape() == Shape({B, whole}),
                  "attention: the key mask {} does not match the batch [{}, {}]", ctx.key_mask.shape(), B, whole);
    attention.key_mask = ctx.key_mask.device() == q.data().device() ? ctx.key_mask : ctx.key_mask.to(q.data().device());
  }
  if (ctx.document_attention && ctx.document_starts.defined()) {
    TRIDENT_CHECK(!ctx.cache, "attention: packed documents with a KV cache are not supported");
    TRIDENT_CHECK(ctx.document_starts.shape() == Shape({B, whole}),
                  "attention: the document starts {} do not match the batch [{}, {}]", ctx.document_starts.shape(), B,
                  whole);
    attention.document_starts = ctx.document_starts.to(q.data().device());
  }
  if (options_.block_layout.defined()) {
    TRIDENT_CHECK(!ctx.cache, "{}: generation with block-sparse attention (model.sparse_attention) is not supported",
                  prefix());
    TRIDENT_CHECK(!attention.document_starts.defined(),
                  "{}: block-sparse attention (model.sparse_attention) with packed documents "
                  "(data.reset_attention_mask) is not supported",
                  prefix());
    const Device device = q.data().device();
    if (!device_layout_.defined() || device_layout_.device() != device) device_layout_ = options_.block_layout.to(device);
    attention.block_layout = device_layout_;
    attention.block = options_.block;
    attention.layout_head_offset = tp_.rank() * H;  // this rank's heads of the layer
  }
  if (ctx.training && options_.attention_dropout > 0) {
    // Addressed by the sample's place in the global batch and the head's place in the layer.
    attention.dropout.p = options_.attention_dropout;
    attention.dropout.rng = ctx.dropout_rng(prefix() + ".probs");
    attention.dropout.batch_offset = ctx.batch_offset;
    attention.dropout.head_offset = tp_.rank() * H;
    attention.dropout.heads = options_.n_head;
  }
  Variable y = cp_.active() ? parallel::context::context_attention(
                                   q, k, v, attention, {cp_, cp_.all_to_all, ctx.context, prefix()})
                             : ag::attention(q, k, v, attention);
  y = out_->forward(ag::reshape(y, {B, T, H * hd}), ctx);
  return dropout(y, options_.dropout, prefix() + ".resid", ctx);
}

FeedForward::FeedForward(std::string prefix, FeedForwardOptions options, const TensorParallel& tp)
    : Layer(std::move(prefix)), options_(std::move(options)), tp_(tp) {
  const FeedForwardOptions& o = options_;
  TRIDENT_CHECK(o.d_model > 0 && o.d_ff > 0, "feed-forward: d_model={} and d_ff={} must be positive", o.d_model,
                o.d_ff);
  TRIDENT_CHECK(tp.size() <= 1 || o.d_ff % tp.size() == 0,
                "dist.tensor_parallel_size={} must divide the MLP width d_ff={}", tp.size(), o.d_ff);
  const std::int64_t D = o.d_model, F = o.d_ff;
  if (o.activation == Activation::swiglu) {
    gate_ = &add_module(std::make_unique<ColumnParallelLinear>(child_prefix(o.gate),
                                                               LinearOptions{D, F, o.bias, o.layout, o.init_std}, tp));
  }
  up_ = &add_module(
      std::make_unique<ColumnParallelLinear>(child_prefix(o.up), LinearOptions{D, F, o.bias, o.layout, o.init_std}, tp));
  down_ = &add_module(std::make_unique<RowParallelLinear>(
      child_prefix(o.down), LinearOptions{F, D, o.bias, o.layout, o.out_init_std}, tp));
}

Variable FeedForward::forward(const Variable& x_in, const ForwardContext& ctx) const {
  const Variable x = enter_tp_region(x_in, tp_);
  Variable h;
  if (options_.activation == Activation::swiglu) {
    h = ag::swiglu(gate_->forward_in_region(x, ctx), up_->forward_in_region(x, ctx));
  } else if (options_.activation == Activation::gelu) {
    h = ag::gelu(up_->forward_in_region(x, ctx));
  } else if (options_.bias) {
    // The first layer's bias is added inside the GELU kernel (Megatron's
    // bias-GELU fusion), not in a pass of its own.
    h = ag::bias_gelu_tanh(up_->forward_in_region(x, ctx, false), up_->bias_view(ctx));
  } else {
    h = ag::gelu_tanh(up_->forward_in_region(x, ctx));
  }
  return dropout(down_->forward(h, ctx), options_.dropout, prefix() + ".resid", ctx);
}

PreNormBlock::PreNormBlock(std::string prefix, std::unique_ptr<Layer> norm1, std::unique_ptr<Layer> attention,
                           std::unique_ptr<Layer> norm2, std::unique_ptr<Layer> mlp)
    : Layer(std::move(prefix)),
      norm1_(&add_module(std::move(norm1))),
      attention_(&add_module(std::move(attention))),
      norm2_(&add_module(std::move(norm2))),
      mlp_(&add_module(std::move(mlp))) {}

Variable PreNormBlock::forward(const Variable& x, const ForwardContext& ctx) const {
  Variable h = ag::add(x, attention_->forward(norm1_->forward(x, ctx), ctx));
  return ag::add(h, mlp_->forward(norm2_->forward(h, ctx), ctx));
}

PostNormBlock::PostNormBlock(std::string prefix, std::unique_ptr<Layer> attention, std::unique_ptr<Layer> norm1,
                             std::unique_ptr<Layer> mlp, std::unique_ptr<Layer> norm2)
    : Layer(std::move(prefix)),
      attention_(&add_module(std::move(attention))),
      norm1_(&add_module(std::move(norm1))),
      mlp_(&add_module(std::move(mlp))),
      norm2_(&add_module(std::move(norm2))) {}

Variable PostNormBlock::forward(const Variable& x, const ForwardContext& ctx) const {
  Variable h = norm1_->forward(ag::add(x, attention_->forward(x, ctx)), ctx);
  return norm2_->forward(ag::add(h, mlp_->forward(h, ctx)), ctx);
}

}  // namespace trident::nn
