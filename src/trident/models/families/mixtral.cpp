// Mixtral (Hugging Face MixtralForCausalLM): Mistral's attention with a
// mixture of SwiGLU experts in place of each block's MLP (nn::MoE), under the
// names transformers saves: model.layers.{i}.block_sparse_moe.gate (the router,
// [n_experts, d_model]) and block_sparse_moe.experts.{e}.w1 / w3 / w2 (gate,
// up, down; transformers 5 fuses them in memory and writes them back per
// expert). The top-k weights are renormalised to sum to 1.
//
// The load-balancing loss is Switch's per layer, summed over layers (Megatron's
// convention), scaled so that one layer's value equals transformers'
// load_balancing_loss_func (which sums the routed fractions over the k slots:
// top_k times nn::MoE's). transformers computes one such loss over all layers'
// tokens together, so with several layers the two differ slightly; the
// coefficient is config.json's router_aux_loss_coef either way.
#include "trident/models/families/llama_like.h"
#include "trident/nn/moe.h"

namespace trident::models {

namespace {

nn::MoEOptions moe_options(const TransformerSpec& s) {
  nn::MoEOptions o;
  o.d_model = s.d_model;
  o.d_ff = s.d_ff;
  o.n_experts = s.n_experts;
  o.top_k = s.experts_per_token;
  o.norm_topk_prob = true;
  o.dispatch = s.moe_capacity_factor > 0 ? nn::MoEDispatch::capacity : nn::MoEDispatch::dropless;
  o.capacity_factor = s.moe_capacity_factor > 0 ? s.moe_capacity_factor : 1.0;
  o.aux_loss_coef = s.moe_aux_loss_coef * static_cast<double>(s.experts_per_token);
  o.z_loss_coef = s.moe_z_loss_coef;
  o.init_std = o.out_init_std = s.init_std;
  o.gate = "gate";
  o.experts = "experts";
  o.expert_gate = "w1";
  o.expert_up = "w3";
  o.expert_down = "w2";
  return o;
}

std::unique_ptr<nn::Layer> block(const std::string& name, const TransformerSpec& s, std::int64_t layer,
                                 const nn::TensorParallel& tp) {
  // The experts are not split by tensor parallelism (and expert parallelism is not built yet).
  TRIDENT_CHECK(!tp.active(),
                "model.arch=mixtral: mixture-of-experts blocks do not run under tensor parallelism yet "
                "(dist.tensor_parallel_size must be 1)");
  return std::make_unique<nn::PreNormBlock>(
      name, llama_like_norm(nn::child_name(name, "input_layernorm"), s, tp),
      std::make_unique<nn::SelfAttention>(nn::child_name(name, "self_attn"), llama_like_attention(s), layer, tp),
      llama_like_norm(nn::child_name(name, "post_attention_layernorm"), s, tp),
      std::make_unique<nn::MoE>(nn::child_name(name, "block_sparse_moe"), moe_options(s)));
}

TransformerSpec sized(std::int64_t L, std::int64_t H, std::int64_t Hkv, std::int64_t D, std::int64_t F,
                      std::int64_t experts, std::int64_t k) {
  TransformerSpec s = llama_like_spec("mixtral", L, H, Hkv, D, F);
  s.n_experts = experts;
  s.experts_per_token = k;
  s.moe_aux_loss_coef = 0.01;
  s.rope.theta = 1e6;
  return s;
}

}  // namespace

Family mixtral_family() {
  Family f = llama_like_family("mixtral", "Mixtral", "mixtral", "MixtralForCausalLM");
  f.moe = true;
  f.defaults = [] { return sized(0, 0, 0, 0, 0, 8, 2); };
  f.presets = {
      {"mixtral-tiny",
       [] {
         TransformerSpec s = sized(2, 4, 2, 64, 128, 4, 2);
         s.vocab_size = 512;
         s.max_seq_len = 128;
         return s;
       }},
      {"mixtral-8x7b",  // Mixtral 8x7B v0.1
       [] {
         TransformerSpec s = sized(32, 32, 8, 4096, 14336, 8, 2);
         s.max_seq_len = 32768;
         s.vocab_size = 32000;
         return s;
       }},
  };
  f.validate = [](const TransformerSpec& s) {
    TRIDENT_CHECK(s.head_dim() % 2 == 0, "model: RoPE needs an even head dimension, got {}", s.head_dim());
    TRIDENT_CHECK(!s.qkv_bias, "model: Mixtral has no q/k/v biases");
    TRIDENT_CHECK(s.sliding_window >= 0, "model.sliding_window must be 0 (none) or positive, got {}",
                  s.sliding_window);
  };
  f.block_parameters = [](const TransformerSpec& s) {
    const long double D = static_cast<long double>(s.d_model), F = static_cast<long double>(s.d_ff);
    const long double E = static_cast<long double>(s.n_experts);
    return llama_like_attention_parameters(s) + D * E + E * 3 * D * F;
  };
  f.make_block = block;
  f.read_hf_config = [](const HfConfigReader& c, TransformerSpec& s) {
    read_llama_like_config(c, s, false);
    s.sliding_window = c.get_or<std::int64_t>("sliding_window", 0);
    TRIDENT_CHECK(s.sliding_window >= 0, "'{}': sliding_window must be null or positive, got {}", c.path(),
                  s.sliding_window);
    s.n_experts = c.get<std::int64_t>("num_local_experts");
    s.experts_per_token = c.get<std::int64_t>("num_experts_per_tok");
    s.moe_aux_loss_coef = c.get_or<double>("router_aux_loss_coef", 0.001);  // transformers' default
    const double jitter = c.get_or<double>("router_jitter_noise", 0.0);
    TRIDENT_CHECK(jitter == 0.0, "'{}': router_jitter_noise={} is not supported (trident's router has no jitter)",
                  c.path(), jitter);
  };
  f.write_hf_config = [](const TransformerSpec& s, HfConfigWriter& c) {
    write_llama_like_config(s, c);
    c.set("sliding_window", s.sliding_window > 0 ? nlohmann::json(s.sliding_window) : nlohmann::json(nullptr));
    c.set("num_local_experts", s.n_experts);
    c.set("num_experts_per_tok", s.experts_per_token);
    c.set("router_aux_loss_coef", s.moe_aux_loss_coef);
    c.set("router_jitter_noise", 0.0);
    c.set("output_router_logits", s.moe_aux_loss_coef > 0);
  };
  return f;
}

}  // namespace trident::models
