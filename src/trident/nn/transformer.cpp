#include "trident/nn/transformer.h"

#include <cmath>

#include "trident/autograd/autograd.h"
#include "trident/ops/shape.h"

namespace trident::nn {

namespace ag = trident::autograd;

void TransformerSpec::validate() const {
  TRIDENT_CHECK(n_layer > 0 && n_head > 0 && d_model > 0 && vocab_size > 0 && max_seq_len > 0,
                "model: n_layer, n_head, d_model, vocab_size and max_seq_len must be positive (got {}, {}, {}, {}, {})",
                n_layer, n_head, d_model, vocab_size, max_seq_len);
  TRIDENT_CHECK(d_model % n_head == 0, "model: d_model={} is not divisible by n_head={}", d_model, n_head);
  TRIDENT_CHECK(n_kv_head > 0 && n_head % n_kv_head == 0, "model: n_head={} is not a multiple of n_kv_head={}",
                n_head, n_kv_head);
  TRIDENT_CHECK(arch == Arch::llama || n_kv_head == n_head, "model: GPT-2 has no grouped-query attention (n_kv_head={} "
                "but n_head={})", n_kv_head, n_head);
  TRIDENT_CHECK(arch == Arch::gpt2 || head_dim() % 2 == 0, "model: RoPE needs an even head dimension, got {}",
                head_dim());
  TRIDENT_CHECK(d_ff > 0, "model: d_ff must be positive, got {}", d_ff);
  TRIDENT_CHECK(dropout >= 0.0 && dropout < 1.0, "model: dropout must be in [0, 1), got {}", dropout);
}

namespace {
// GPT-2 scales the init of the projections that write into the residual stream.
double residual_std(const TransformerSpec& s) {
  return s.arch == Arch::gpt2 ? s.init_std / std::sqrt(2.0 * static_cast<double>(s.n_layer)) : s.init_std;
}
}  // namespace

CausalSelfAttention::CausalSelfAttention(std::string prefix, const TransformerSpec& spec, std::int64_t layer_index)
    : Module(std::move(prefix)), spec_(spec), layer_(layer_index) {
  const std::int64_t D = spec.d_model, hd = spec.head_dim();
  if (spec.arch == Arch::gpt2) {
    qkv_ = &add_module(std::make_unique<Linear>(child_prefix("c_attn"),
                                                LinearOptions{D, 3 * D, true, WeightLayout::in_out, spec.init_std}));
    out_ = &add_module(std::make_unique<Linear>(child_prefix("c_proj"),
                                                LinearOptions{D, D, true, WeightLayout::in_out, residual_std(spec)}));
  } else {
    const LinearOptions q{D, spec.n_head * hd, false, WeightLayout::out_in, spec.init_std};
    const LinearOptions kv{D, spec.n_kv_head * hd, false, WeightLayout::out_in, spec.init_std};
    q_ = &add_module(std::make_unique<Linear>(child_prefix("q_proj"), q));
    k_ = &add_module(std::make_unique<Linear>(child_prefix("k_proj"), kv));
    v_ = &add_module(std::make_unique<Linear>(child_prefix("v_proj"), kv));
    out_ = &add_module(std::make_unique<Linear>(
        child_prefix("o_proj"), LinearOptions{spec.n_head * hd, D, false, WeightLayout::out_in, residual_std(spec)}));
  }
}

Variable CausalSelfAttention::forward(const Variable& x, const ForwardContext& ctx) const {
  const std::int64_t B = x.shape()[0], T = x.shape()[1], hd = spec_.head_dim();
  const std::int64_t H = spec_.n_head, Hkv = spec_.n_kv_head;
  Variable q, k, v;
  if (qkv_) {
    auto parts = ag::split(qkv_->forward(x, ctx), {H * hd, H * hd, H * hd}, -1);
    q = ag::reshape(parts[0], {B, T, H, hd});
    k = ag::reshape(parts[1], {B, T, H, hd});
    v = ag::reshape(parts[2], {B, T, H, hd});
  } else {
    q = ag::rope(ag::reshape(q_->forward(x, ctx), {B, T, H, hd}), ctx.position_offset, spec_.rope_theta);
    k = ag::rope(ag::reshape(k_->forward(x, ctx), {B, T, Hkv, hd}), ctx.position_offset, spec_.rope_theta);
    v = ag::reshape(v_->forward(x, ctx), {B, T, Hkv, hd});
  }
  if (ctx.cache) {
    // Generation: prepend the cached keys/values (no gradients flow here).
    auto& ck = ctx.cache->keys[static_cast<std::size_t>(layer_)];
    auto& cv = ctx.cache->values[static_cast<std::size_t>(layer_)];
    Tensor keys = ck.defined() ? ops::concat({ck, k.data()}, 1) : k.data();
    Tensor values = cv.defined() ? ops::concat({cv, v.data()}, 1) : v.data();
    ck = keys;
    cv = values;
    k = Variable(keys, false);
    v = Variable(values, false);
  }
  Variable y = ag::attention(q, k, v, ops::AttentionOptions{});
  y = out_->forward(ag::reshape(y, {B, T, H * hd}), ctx);
  return dropout(y, spec_.dropout, prefix() + ".resid", ctx);
}

MLP::MLP(std::string prefix, const TransformerSpec& spec) : Module(std::move(prefix)), spec_(spec) {
  const std::int64_t D = spec.d_model, F = spec.d_ff;
  if (spec.arch == Arch::gpt2) {
    fc_ = &add_module(
        std::make_unique<Linear>(child_prefix("c_fc"), LinearOptions{D, F, true, WeightLayout::in_out, spec.init_std}));
    down_ = &add_module(std::make_unique<Linear>(child_prefix("c_proj"),
                                                 LinearOptions{F, D, true, WeightLayout::in_out, residual_std(spec)}));
  } else {
    gate_ = &add_module(std::make_unique<Linear>(child_prefix("gate_proj"),
                                                 LinearOptions{D, F, false, WeightLayout::out_in, spec.init_std}));
    up_ = &add_module(
        std::make_unique<Linear>(child_prefix("up_proj"), LinearOptions{D, F, false, WeightLayout::out_in, spec.init_std}));
    down_ = &add_module(std::make_unique<Linear>(child_prefix("down_proj"),
                                                 LinearOptions{F, D, false, WeightLayout::out_in, residual_std(spec)}));
  }
}

Variable MLP::forward(const Variable& x, const ForwardContext& ctx) const {
  Variable h = fc_ ? ag::gelu_tanh(fc_->forward(x, ctx)) : ag::swiglu(gate_->forward(x, ctx), up_->forward(x, ctx));
  return dropout(down_->forward(h, ctx), spec_.dropout, prefix() + ".resid", ctx);
}

TransformerBlock::TransformerBlock(std::string prefix, const TransformerSpec& spec, std::int64_t layer_index)
    : Module(std::move(prefix)), spec_(spec) {
  if (spec.arch == Arch::gpt2) {
    norm1_ = &add_module(std::make_unique<LayerNorm>(child_prefix("ln_1"), spec.d_model, spec.norm_eps));
    attn_ = &add_module(std::make_unique<CausalSelfAttention>(child_prefix("attn"), spec, layer_index));
    norm2_ = &add_module(std::make_unique<LayerNorm>(child_prefix("ln_2"), spec.d_model, spec.norm_eps));
    mlp_ = &add_module(std::make_unique<MLP>(child_prefix("mlp"), spec));
  } else {
    norm1_ = &add_module(std::make_unique<RMSNorm>(child_prefix("input_layernorm"), spec.d_model, spec.norm_eps));
    attn_ = &add_module(std::make_unique<CausalSelfAttention>(child_prefix("self_attn"), spec, layer_index));
    norm2_ = &add_module(
        std::make_unique<RMSNorm>(child_prefix("post_attention_layernorm"), spec.d_model, spec.norm_eps));
    mlp_ = &add_module(std::make_unique<MLP>(child_prefix("mlp"), spec));
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
