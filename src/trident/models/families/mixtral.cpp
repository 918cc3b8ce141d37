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

namespace trident::models {

namespace {

std::unique_ptr<nn::Layer> block(const std::string& name, const TransformerSpec& s, std::int64_t layer,
                                 const ModelParallel& mp) {
  nn::MoEOptions o = llama_like_moe_options(s);
  o.expert_gate = "w1";
  o.expert_up = "w3";
  o.expert_down = "w2";
  return llama_like_moe_block(name, s, layer, mp, "block_sparse_moe", o);
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
    TRIDENT_CHECK(s.moe_shared_d_ff == 0 && s.moe_norm_topk_prob && s.moe_d_ff == 0,
                  "model: Mixtral's experts are d_ff wide, renormalised, with no shared expert (model.moe_d_ff, "
                  "moe_shared_d_ff must be 0 and moe_norm_topk_prob true)");
  };
  f.block_parameters = [](const TransformerSpec& s) { return llama_like_attention_parameters(s) + moe_parameters(s); };
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
