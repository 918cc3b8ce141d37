// Qwen2-MoE (Hugging Face Qwen2MoeForCausalLM, Qwen1.5-MoE): Qwen2's attention
// (q/k/v biases) with a mixture of experts in every block's MLP: a router
// (mlp.gate), n_experts SwiGLU experts of width moe_intermediate_size
// (mlp.experts.{e}.gate_proj / up_proj / down_proj), top-k weights kept as the
// softmax gave them unless norm_topk_prob, and a shared expert every token
// passes through (mlp.shared_expert.*, shared_expert_intermediate_size wide),
// scaled by sigmoid(mlp.shared_expert_gate · x).
//
// Every layer is sparse: a config with dense layers (decoder_sparse_step > 1,
// mlp_only_layers) or a sliding window is refused with its key.
#include "trident/models/families/llama_like.h"

namespace trident::models {

namespace {

std::unique_ptr<nn::Layer> block(const std::string& name, const TransformerSpec& s, std::int64_t layer,
                                 const ModelParallel& mp) {
  nn::MoEOptions o = llama_like_moe_options(s);
  o.expert_gate = "gate_proj";
  o.expert_up = "up_proj";
  o.expert_down = "down_proj";
  o.shared_expert = "shared_expert";
  o.shared_expert_gate = "shared_expert_gate";
  return llama_like_moe_block(name, s, layer, mp, "mlp", o);
}

TransformerSpec sized(std::int64_t L, std::int64_t H, std::int64_t Hkv, std::int64_t D, std::int64_t F,
                      std::int64_t experts, std::int64_t k, std::int64_t expert_ff, std::int64_t shared_ff) {
  TransformerSpec s = llama_like_spec("qwen2_moe", L, H, Hkv, D, F);
  s.qkv_bias = true;
  s.vocab_size = 151936;
  s.max_seq_len = 8192;
  s.rope.theta = 1000000.0;
  s.n_experts = experts;
  s.experts_per_token = k;
  s.moe_d_ff = expert_ff;
  s.moe_shared_d_ff = shared_ff;
  s.moe_norm_topk_prob = false;
  s.moe_aux_loss_coef = 0.001;
  return s;
}

}  // namespace

Family qwen2_moe_family() {
  Family f = llama_like_family("qwen2_moe", "Qwen2-MoE", "qwen2_moe", "Qwen2MoeForCausalLM");
  f.moe = true;
  f.eod_is_bos = true;  // as Qwen2
  f.defaults = [] { return sized(0, 0, 0, 0, 0, 60, 4, 0, 0); };
  f.presets = {
      {"qwen2_moe-tiny",
       [] {
         TransformerSpec s = sized(2, 4, 2, 64, 192, 4, 2, 48, 96);
         s.vocab_size = 512;
         s.max_seq_len = 128;
         return s;
       }},
      {"qwen1.5-moe-a2.7b",  // Qwen1.5-MoE-A2.7B
       [] { return sized(24, 16, 16, 2048, 5632, 60, 4, 1408, 5632); }},
  };
  f.validate = [](const TransformerSpec& s) {
    TRIDENT_CHECK(s.head_dim() % 2 == 0, "model: RoPE needs an even head dimension, got {}", s.head_dim());
    TRIDENT_CHECK(s.qkv_bias, "model: Qwen2-MoE has q/k/v biases");
    TRIDENT_CHECK(s.sliding_window == 0, "model.sliding_window={}: trident's Qwen2-MoE has no sliding window",
                  s.sliding_window);
    TRIDENT_CHECK(s.moe_shared_d_ff > 0, "model.moe_shared_d_ff must be positive: Qwen2-MoE has a shared expert");
  };
  f.block_parameters = [](const TransformerSpec& s) { return llama_like_attention_parameters(s) + moe_parameters(s); };
  f.make_block = block;
  f.read_hf_config = [](const HfConfigReader& c, TransformerSpec& s) {
    read_llama_like_config(c, s, false);
    s.qkv_bias = true;
    c.require_false("use_sliding_window", "trident's Qwen2-MoE has no sliding window");
    s.n_experts = c.get<std::int64_t>("num_experts");
    s.experts_per_token = c.get<std::int64_t>("num_experts_per_tok");
    s.moe_d_ff = c.get<std::int64_t>("moe_intermediate_size");
    s.moe_shared_d_ff = c.get_or<std::int64_t>("shared_expert_intermediate_size", 0);
    s.moe_norm_topk_prob = c.get_or<bool>("norm_topk_prob", false);  // transformers' default
    s.moe_aux_loss_coef = c.get_or<double>("router_aux_loss_coef", 0.001);
    const auto step = c.get_or<std::int64_t>("decoder_sparse_step", 1);
    TRIDENT_CHECK(step == 1, "'{}': decoder_sparse_step={} makes some layers dense; trident builds every layer sparse",
                  c.path(), step);
    const auto dense = c.get_or<std::vector<std::int64_t>>("mlp_only_layers", {});
    TRIDENT_CHECK(dense.empty(), "'{}': mlp_only_layers makes {} layer(s) dense; trident builds every layer sparse",
                  c.path(), dense.size());
  };
  f.write_hf_config = [](const TransformerSpec& s, HfConfigWriter& c) {
    write_llama_like_config(s, c);
    c.set("num_experts", s.n_experts);
    c.set("num_experts_per_tok", s.experts_per_token);
    c.set("moe_intermediate_size", s.expert_d_ff());
    c.set("shared_expert_intermediate_size", s.moe_shared_d_ff);
    c.set("norm_topk_prob", s.moe_norm_topk_prob);
    c.set("router_aux_loss_coef", s.moe_aux_loss_coef);
    c.set("output_router_logits", s.moe_aux_loss_coef > 0);
    c.set("decoder_sparse_step", 1);
    c.set("mlp_only_layers", nlohmann::json::array());
    c.set("use_sliding_window", false);
  };
  return f;
}

}  // namespace trident::models
