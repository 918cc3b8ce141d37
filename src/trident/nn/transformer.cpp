#include "trident/nn/transformer.h"

#include <cmath>

#include "trident/autograd/autograd.h"
#include "trident/ops/shape.h"

namespace trident::nn {

namespace ag = trident::autograd;

std::int64_t TransformerSpec::num_parameters() const {
  const std::int64_t D = d_model, F = d_ff, q = n_head * head_dim(), kv = n_kv_head * head_dim();
  const std::int64_t head = tie_embeddings ? 0 : vocab_size * D;
  if (arch == Arch::gpt2) {
    const std::int64_t layer = 2 * D + (D * 3 * D + 3 * D) + (D * D + D) + 2 * D + (D * F + F) + (F * D + D);
    return vocab_size * D + max_seq_len * D + n_layer * layer + 2 * D + head;
  }
  const std::int64_t layer = D + D * q + 2 * D * kv + q * D + D + 3 * D * F;
  return vocab_size * D + n_layer * layer + D + head;
}

void TransformerSpec::validate() const {
  TRIDENT_CHECK(n_layer > 0 && n_head > 0 && d_model > 0 && vocab_size > 0 && max_seq_len > 0,
                "model: n_layer, n_head, d_model, vocab_size and max_seq_len must be positive (got {}, {}, {}, {}, {})",
                n_layer, n_head, d_model, vocab_size, max_seq_len);
  TRIDENT_CHECK(d_model % n_head == 0, "model: d_model={} is not divisible by n_head={}", d_model, n_head);
  TRIDENT_CHECK(n_kv_head > 0 && n_head % n_kv_head == 0, "model: n_head={} is not a multiple of n_kv_head={}", n_head,
                n_kv_head);
  TRIDENT_CHECK(arch == Arch::llama || n_kv_head == n_head,
                "model: GPT-2 has no grouped-query attention (n_kv_head={} "
                "but n_head={})",
                n_kv_head, n_head);
  TRIDENT_CHECK(arch == Arch::gpt2 || head_dim() % 2 == 0, "model: RoPE needs an even head dimension, got {}",
                head_dim());
  TRIDENT_CHECK(d_ff > 0, "model: d_ff must be positive, got {}", d_ff);
  TRIDENT_CHECK(dropout >= 0.0 && dropout < 1.0, "model: dropout must be in [0, 1), got {}", dropout);
}

void TransformerSpec::validate_tensor_parallel(int tp) const {
  if (tp <= 1) return;
  TRIDENT_CHECK(n_head % tp == 0, "dist.tensor_parallel_size={} must divide the number of attention heads n_head={}",
                tp, n_head);
  TRIDENT_CHECK(n_kv_head % tp == 0,
                "dist.tensor_parallel_size={} must divide the number of key/value heads n_kv_head={} (each rank "
                "holds whole query groups)",
                tp, n_kv_head);
  TRIDENT_CHECK(d_ff % tp == 0, "dist.tensor_parallel_size={} must divide the MLP width d_ff={}", tp, d_ff);
}

namespace {
// GPT-2 scales the init of the projections that write into the residual stream.
double residual_std(const TransformerSpec& s) {
  return s.arch == Arch::gpt2 ? s.init_std / std::sqrt(2.0 * static_cast<double>(s.n_layer)) : s.init_std;
}
}  // namespace

CausalSelfAttention::CausalSelfAttention(std::string prefix, const TransformerSpec& spec, std::int64_t layer_index,
                                         const TensorParallel& tp)
    : Module(std::move(prefix)), spec_(spec), layer_(layer_index), tp_(tp) {
  spec.validate_tensor_parallel(tp.size());
  const std::int64_t D = spec.d_model, hd = spec.head_dim();
  if (spec.arch == Arch::gpt2) {
    // Fused [q | k | v] in Hugging Face's layout; each is split by heads separately.
    LinearOptions qkv{D, 3 * D, true, WeightLayout::in_out, spec.init_std};
    qkv.out_segments = {D, D, D};
    qkv_ = &add_module(std::make_unique<ColumnParallelLinear>(child_prefix("c_attn"), qkv, tp));
    out_ = &add_module(std::make_unique<RowParallelLinear>(
        child_prefix("c_proj"), LinearOptions{D, D, true, WeightLayout::in_out, residual_std(spec)}, tp));
  } else {
    const LinearOptions q{D, spec.n_head * hd, false, WeightLayout::out_in, spec.init_std};
    const LinearOptions kv{D, spec.n_kv_head * hd, false, WeightLayout::out_in, spec.init_std};
    q_ = &add_module(std::make_unique<ColumnParallelLinear>(child_prefix("q_proj"), q, tp));
    k_ = &add_module(std::make_unique<ColumnParallelLinear>(child_prefix("k_proj"), kv, tp));
    v_ = &add_module(std::make_unique<ColumnParallelLinear>(child_prefix("v_proj"), kv, tp));
    out_ = &add_module(std::make_unique<RowParallelLinear>(
        child_prefix("o_proj"), LinearOptions{spec.n_head * hd, D, false, WeightLayout::out_in, residual_std(spec)},
        tp));
  }
}

Variable CausalSelfAttention::forward(const Variable& x_in, const ForwardContext& ctx) const {
  const Variable x = enter_tp_region(x_in, tp_);  // [B, T, D]: the whole sequence
  const std::int64_t B = x.shape()[0], T = x.shape()[1], hd = spec_.head_dim();
  const std::int64_t H = spec_.n_head / tp_.size(), Hkv = spec_.n_kv_head / tp_.size();  // this rank's heads
  Variable q, k, v;
  if (qkv_) {
    auto parts = ag::split(qkv_->forward_in_region(x, ctx), {H * hd, H * hd, H * hd}, -1);
    q = ag::reshape(parts[0], {B, T, H, hd});
    k = ag::reshape(parts[1], {B, T, H, hd});
    v = ag::reshape(parts[2], {B, T, H, hd});
  } else {
    q = ag::rope(ag::reshape(q_->forward_in_region(x, ctx), {B, T, H, hd}), ctx.position_offset, spec_.rope);
    k = ag::rope(ag::reshape(k_->forward_in_region(x, ctx), {B, T, Hkv, hd}), ctx.position_offset, spec_.rope);
    v = ag::reshape(v_->forward_in_region(x, ctx), {B, T, Hkv, hd});
  }
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
  Variable y = ag::attention(q, k, v, ops::AttentionOptions{});
  y = out_->forward(ag::reshape(y, {B, T, H * hd}), ctx);
  return dropout(y, spec_.dropout, prefix() + ".resid", ctx);
}

MLP::MLP(std::string prefix, const TransformerSpec& spec, const TensorParallel& tp)
    : Module(std::move(prefix)), spec_(spec), tp_(tp) {
  spec.validate_tensor_parallel(tp.size());
  const std::int64_t D = spec.d_model, F = spec.d_ff;
  if (spec.arch == Arch::gpt2) {
    fc_ = &add_module(std::make_unique<ColumnParallelLinear>(
        child_prefix("c_fc"), LinearOptions{D, F, true, WeightLayout::in_out, spec.init_std}, tp));
    down_ = &add_module(std::make_unique<RowParallelLinear>(
        child_prefix("c_proj"), LinearOptions{F, D, true, WeightLayout::in_out, residual_std(spec)}, tp));
  } else {
    gate_ = &add_module(std::make_unique<ColumnParallelLinear>(
        child_prefix("gate_proj"), LinearOptions{D, F, false, WeightLayout::out_in, spec.init_std}, tp));
    up_ = &add_module(std::make_unique<ColumnParallelLinear>(
        child_prefix("up_proj"), LinearOptions{D, F, false, WeightLayout::out_in, spec.init_std}, tp));
    down_ = &add_module(std::make_unique<RowParallelLinear>(
        child_prefix("down_proj"), LinearOptions{F, D, false, WeightLayout::out_in, residual_std(spec)}, tp));
  }
}

Variable MLP::forward(const Variable& x_in, const ForwardContext& ctx) const {
  const Variable x = enter_tp_region(x_in, tp_);
  // GPT-2: the c_fc bias is added inside the GELU kernel (Megatron's
  // bias-GELU fusion), not in a pass of its own.
  Variable h = fc_ ? ag::bias_gelu_tanh(fc_->forward_in_region(x, ctx, false), fc_->bias_view(ctx))
                   : ag::swiglu(gate_->forward_in_region(x, ctx), up_->forward_in_region(x, ctx));
  return dropout(down_->forward(h, ctx), spec_.dropout, prefix() + ".resid", ctx);
}

TransformerBlock::TransformerBlock(std::string prefix, const TransformerSpec& spec, std::int64_t layer_index,
                                   const TensorParallel& tp)
    : Module(std::move(prefix)), spec_(spec) {
  if (spec.arch == Arch::gpt2) {
    norm1_ = &add_module(std::make_unique<LayerNorm>(child_prefix("ln_1"), spec.d_model, spec.norm_eps, true, tp));
    attn_ = &add_module(std::make_unique<CausalSelfAttention>(child_prefix("attn"), spec, layer_index, tp));
    norm2_ = &add_module(std::make_unique<LayerNorm>(child_prefix("ln_2"), spec.d_model, spec.norm_eps, true, tp));
    mlp_ = &add_module(std::make_unique<MLP>(child_prefix("mlp"), spec, tp));
  } else {
    norm1_ = &add_module(std::make_unique<RMSNorm>(child_prefix("input_layernorm"), spec.d_model, spec.norm_eps, tp));
    attn_ = &add_module(std::make_unique<CausalSelfAttention>(child_prefix("self_attn"), spec, layer_index, tp));
    norm2_ = &add_module(
        std::make_unique<RMSNorm>(child_prefix("post_attention_layernorm"), spec.d_model, spec.norm_eps, tp));
    mlp_ = &add_module(std::make_unique<MLP>(child_prefix("mlp"), spec, tp));
  }
}

Variable TransformerBlock::norm(const Module* m, const Variable& x, const ForwardContext& ctx) const {
  if (spec_.arch == Arch::gpt2) return static_cast<const LayerNorm*>(m)->forward(x, ctx);
  return static_cast<const RMSNorm*>(m)->forward(x, ctx);
}

Variable TransformerBlock::forward(const Variable& x, const ForwardContext& ctx) const {
  Variable h = ag::add(x, attn_->forward(norm(norm1_, x, ctx), ctx));
  return ag::add(h, mlp_->forward(norm(norm2_, h, ctx), ctx));
}

}  // namespace trident::nn
