// LLaMA (Hugging Face LlamaForCausalLM), and the structure the LLaMA-shaped
// families share (llama_like.h).
#include "trident/models/families/llama_like.h"
#include "trident/nn/transformer.h"

namespace trident::models {

std::unique_ptr<nn::Layer> llama_like_norm(const std::string& name, const TransformerSpec& s,
                                           const nn::TensorParallel& tp) {
  return std::make_unique<nn::RMSNorm>(name, s.d_model, s.norm_eps, tp);
}

nn::SelfAttentionOptions llama_like_attention(const TransformerSpec& s) {
  nn::SelfAttentionOptions a;
  a.d_model = s.d_model;
  a.n_head = s.n_head;
  a.n_kv_head = s.n_kv_head;
  a.qkv_bias = s.qkv_bias;
  a.layout = nn::WeightLayout::out_in;
  a.rope = s.rope;
  a.window = s.sliding_window;
  a.dropout = s.dropout;
  a.attention_dropout = s.attention_dropout;
  a.init_std = a.out_init_std = s.init_std;
  a.q = "q_proj";
  a.k = "k_proj";
  a.v = "v_proj";
  a.out = "o_proj";
  set_sparse_attention(s, a);
  return a;
}

nn::FeedForwardOptions llama_like_mlp(const TransformerSpec& s) {
  nn::FeedForwardOptions f;
  f.d_model = s.d_model;
  f.d_ff = s.d_ff;
  f.activation = nn::Activation::swiglu;
  f.layout = nn::WeightLayout::out_in;
  f.dropout = s.dropout;
  f.init_std = f.out_init_std = s.init_std;
  f.gate = "gate_proj";
  f.up = "up_proj";
  f.down = "down_proj";
  return f;
}

long double llama_like_attention_parameters(const TransformerSpec& s) {
  const long double D = static_cast<long double>(s.d_model);
  const long double hd = s.n_head > 0 ? static_cast<long double>(s.d_model / s.n_head) : 0;
  const long double q = static_cast<long double>(s.n_head) * hd, kv = static_cast<long double>(s.n_kv_head) * hd;
  return 2 * D + D * q + 2 * D * kv + q * D + (s.qkv_bias ? q + 2 * kv : 0);
}

nn::MoEOptions llama_like_moe_options(const TransformerSpec& s) {
  nn::MoEOptions o;
  o.d_model = s.d_model;
  o.d_ff = s.expert_d_ff();
  o.n_experts = s.n_experts;
  o.top_k = s.experts_per_token;
  o.norm_topk_prob = s.moe_norm_topk_prob;
  o.dispatch = s.moe_capacity_factor > 0 ? nn::MoEDispatch::capacity : nn::MoEDispatch::dropless;
  o.capacity_factor = s.moe_capacity_factor > 0 ? s.moe_capacity_factor : 1.0;
  o.aux_loss_coef = s.moe_aux_loss_coef * static_cast<double>(s.experts_per_token);
  o.z_loss_coef = s.moe_z_loss_coef;
  o.shared_d_ff = s.moe_shared_d_ff;
  o.shared_gated = s.moe_shared_d_ff > 0;
  o.init_std = o.out_init_std = s.init_std;
  return o;
}

long double moe_parameters(const TransformerSpec& s) {
  const long double D = static_cast<long double>(s.d_model), E = static_cast<long double>(s.n_experts);
  const long double F = static_cast<long double>(s.expert_d_ff()), S = static_cast<long double>(s.moe_shared_d_ff);
  return D * E + E * 3 * D * F + (s.moe_shared_d_ff > 0 ? 3 * D * S + D : 0);
}

std::unique_ptr<nn::Layer> llama_like_moe_block(const std::string& name, const TransformerSpec& s, std::int64_t layer,
                                                const ModelParallel& mp, const std::string& moe,
                                                const nn::MoEOptions& options) {
  // Under tensor parallelism the attention is split; the MoE layer runs whole on every tensor-parallel
  // rank (the same tokens: no sequence parallelism, which the trainer refuses with experts), its experts
  // split by expert parallelism only.
  const nn::TensorParallel& tp = mp.tp;
  nn::MoEOptions o = options;
  o.layer = layer;
  TRIDENT_CHECK(!tp.sequence_split(),
                "model.arch={}: mixture-of-experts blocks do not run under sequence parallelism (set "
                "dist.sequence_parallel=false)",
                s.family);
  return std::make_unique<nn::PreNormBlock>(
      name, llama_like_norm(nn::child_name(name, "input_layernorm"), s, tp),
      std::make_unique<nn::SelfAttention>(nn::child_name(name, "self_attn"), llama_like_attention(s), layer, tp, mp.cp),
      llama_like_norm(nn::child_name(name, "post_attention_layernorm"), s, tp),
      std::make_unique<nn::MoE>(nn::child_name(name, moe), o, mp.ep, mp.cp));
}

namespace {

std::unique_ptr<nn::Layer> block(const std::string& name, const TransformerSpec& s, std::int64_t layer,
                                 const ModelParallel& mp) {
  const nn::TensorParallel& tp = mp.tp;
  return std::make_unique<nn::PreNormBlock>(
      name, llama_like_norm(nn::child_name(name, "input_layernorm"), s, tp),
      std::make_unique<nn::SelfAttention>(nn::child_name(name, "self_attn"), llama_like_attention(s), layer, tp, mp.cp),
      llama_like_norm(nn::child_name(name, "post_attention_layernorm"), s, tp),
      std::make_unique<nn::FeedForward>(nn::child_name(name, "mlp"), llama_like_mlp(s), tp));
}

}  // namespace

TransformerSpec llama_like_spec(const std::string& family, std::int64_t L, std::int64_t H, std::int64_t Hkv,
                                std::int64_t D, std::int64_t F) {
  TransformerSpec s;
  s.family = family;
  s.n_layer = L;
  s.n_head = H;
  s.n_kv_head = Hkv;
  s.d_model = D;
  s.d_ff = F;
  s.vocab_size = 32000;
  s.max_seq_len = 2048;
  s.norm_eps = 1e-6;
  s.rope.theta = 10000.0;
  s.tie_embeddings = false;
  return s;
}

// The LLaMA-shaped families' config.json keys of the spec's fields, read in this order.
std::vector<HfKey> llama_like_hf_keys(bool tie_default) {
  using S = TransformerSpec;
  return {
      {"num_hidden_layers", &S::n_layer},
      {"num_attention_heads", &S::n_head},
      {"num_key_value_heads", &S::n_kv_head, [](const S& s) { return s.n_head; }},
      {"hidden_size", &S::d_model},
      {"intermediate_size", &S::d_ff},
      {"vocab_size", &S::vocab_size},
      {"max_position_embeddings", &S::max_seq_len},
      {"rms_norm_eps", &S::norm_eps, 1e-6},
      {"attention_dropout", &S::attention_dropout, 0.0},
      {"initializer_range", &S::init_std, 0.02},
      {"tie_word_embeddings", &S::tie_embeddings, tie_default},
  };
}

void read_llama_like_config(const HfConfigReader& c, TransformerSpec& s, bool tie_default) {
  read_keys(c, s, llama_like_hf_keys(tie_default));
  const std::string act = c.get_or<std::string>("hidden_act", "silu");
  TRIDENT_CHECK(act == "silu" || act == "swish",
                "'{}': hidden_act '{}' is not supported (trident's {} MLP is SwiGLU, hidden_act silu)", c.path(), act,
                c.get<std::string>("model_type"));
  s.rope = c.rope();
  c.check_head_dim(s.d_model, s.n_head);
}

void write_llama_like_config(const TransformerSpec& s, HfConfigWriter& c) {
  write_keys(s, c, llama_like_hf_keys(false));  // every key is written: the fallback plays no part
  c.set("hidden_act", "silu");
  c.rope(s.rope);
}

Family llama_like_family(const std::string& name, const std::string& display_name, const std::string& hf_model_type,
                         const std::string& hf_architecture) {
  Family f;
  f.name = name;
  f.display_name = display_name;
  f.hf_model_type = hf_model_type;
  f.hf_architecture = hf_architecture;
  f.names.token_embedding = "model.embed_tokens";
  f.names.embed_dropout = "model.drop";
  f.names.layers = "model.layers";
  f.names.final_norm = "model.norm";
  f.defaults = [name] { return llama_like_spec(name, 0, 0, 0, 0, 0); };
  // Saved per token: the two RMSNorms' inputs and outputs; q and k after RoPE, v, and attention's output;
  // SwiGLU's gate and up and their product (one fused op). A mixture of experts instead keeps its
  // router's logits and, for each of the top-k experts a token reaches, the dispatched input and output
  // and the expert's values with the regrouping's copies (and the shared expert's, with its gate).
  f.block_activations = [](const TransformerSpec& s) {
    const long double D = static_cast<long double>(s.d_model);
    const long double kv = s.n_head > 0 ? static_cast<long double>(s.n_kv_head * (s.d_model / s.n_head)) : 0;
    Family::SavedValues v{4 * D, 2 * D + 2 * kv, 0, 0};
    if (s.n_experts == 0) {
      v.split += 3 * static_cast<long double>(s.d_ff);
      v.backward = 2 * static_cast<long double>(s.d_ff);
      return v;
    }
    const long double k = static_cast<long double>(s.experts_per_token), Fe = static_cast<long double>(s.expert_d_ff());
    v.replicated += static_cast<long double>(s.n_experts);
    v.experts = k * (2 * D + 4 * Fe);
    v.backward = 2 * k * Fe;
    if (s.moe_shared_d_ff > 0) v.replicated += 3 * static_cast<long double>(s.moe_shared_d_ff) + 1;
    return v;
  };
  // 2/3 · 4d rounded up to a multiple of 256.
  f.default_d_ff = [](std::int64_t d) { return ((8 * d + 2) / 3 + 255) / 256 * 256; };
  f.validate = [display_name](const TransformerSpec& s) {
    TRIDENT_CHECK(s.head_dim() % 2 == 0, "model: RoPE needs an even head dimension, got {}", s.head_dim());
    TRIDENT_CHECK(!s.qkv_bias, "model: {} has no q/k/v biases", display_name);
    TRIDENT_CHECK(s.sliding_window == 0,
                  "model.sliding_window={}: {} attends to every earlier token (a window needs model.arch=mistral)",
                  s.sliding_window, display_name);
  };
  f.block_parameters = [](const TransformerSpec& s) {
    return llama_like_attention_parameters(s) +
           3 * static_cast<long double>(s.d_model) * static_cast<long double>(s.d_ff);
  };
  f.other_parameters = [](const TransformerSpec& s) { return static_cast<long double>(s.d_model); };
  f.read_hf_config = [](const HfConfigReader& c, TransformerSpec& s) { read_llama_like_config(c, s, false); };
  f.write_hf_config = write_llama_like_config;
  f.make_norm = llama_like_norm;
  f.make_block = block;
  return f;
}

Family llama_family() {
  Family f = llama_like_family("llama", "LLaMA", "llama", "LlamaForCausalLM");
  f.presets = {
      {"llama-tiny",
       [] {
         TransformerSpec s = llama_like_spec("llama", 2, 4, 2, 64, 192);
         s.vocab_size = 512;
         s.max_seq_len = 128;
         return s;
       }},
      {"llama-small", [] { return llama_like_spec("llama", 8, 8, 4, 512, 1536); }},
      // TinyLlama-1.1B's shape (1.10B parameters): the ~1B LLaMA of the GPU benchmark.
      {"llama-1b", [] { return llama_like_spec("llama", 22, 32, 4, 2048, 5632); }},
      {"llama2-7b", [] { return llama_like_spec("llama", 32, 32, 32, 4096, 11008); }},
  };
  f.read_hf_config = [](const HfConfigReader& c, TransformerSpec& s) {
    read_llama_like_config(c, s, false);
    for (const char* bias : {"attention_bias", "mlp_bias"}) {
      c.require_false(bias, "trident's LLaMA has no biases");
    }
  };
  f.write_hf_config = [](const TransformerSpec& s, HfConfigWriter& c) {
    write_llama_like_config(s, c);
    c.set("attention_bias", false);
    c.set("mlp_bias", false);
  };
  return f;
}

}  // namespace trident::models
