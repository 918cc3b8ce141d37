// GPT-2 (Hugging Face GPT2LMHeadModel): pre-LayerNorm blocks, a fused QKV
// projection in Conv1D's [in, out] layout with biases, learned positions, a
// GELU (tanh) MLP with biases, tied embeddings by default.
#include <cmath>

#include "trident/models/families/gpt_like.h"
#include "trident/models/family.h"
#include "trident/models/hf_config.h"
#include "trident/nn/transformer.h"

namespace trident::models {

namespace {

// GPT-2 scales the init of the projections that write into the residual stream.
double residual_std(const TransformerSpec& s) {
  return s.init_std / std::sqrt(2.0 * static_cast<double>(s.n_layer));
}

std::unique_ptr<nn::Layer> norm(const std::string& name, const TransformerSpec& s, const nn::TensorParallel& tp) {
  return std::make_unique<nn::LayerNorm>(name, s.d_model, s.norm_eps, true, tp);
}

std::unique_ptr<nn::Layer> block(const std::string& name, const TransformerSpec& s, std::int64_t layer,
                                 const ModelParallel& mp) {
  const nn::TensorParallel& tp = mp.tp;
  nn::SelfAttentionOptions a;
  a.d_model = s.d_model;
  a.n_head = s.n_head;
  a.n_kv_head = s.n_kv_head;
  a.fused_qkv = true;
  a.qkv_bias = a.out_bias = true;
  a.layout = nn::WeightLayout::in_out;
  a.dropout = s.dropout;
  a.attention_dropout = s.attention_dropout;
  a.init_std = s.init_std;
  a.out_init_std = residual_std(s);
  a.qkv = "c_attn";
  a.out = "c_proj";
  set_sparse_attention(s, a);
  nn::FeedForwardOptions f;
  f.d_model = s.d_model;
  f.d_ff = s.d_ff;
  f.activation = nn::Activation::gelu_tanh;
  f.bias = true;
  f.layout = nn::WeightLayout::in_out;
  f.dropout = s.dropout;
  f.init_std = s.init_std;
  f.out_init_std = residual_std(s);
  f.up = "c_fc";
  f.down = "c_proj";
  return std::make_unique<nn::PreNormBlock>(
      name, norm(nn::child_name(name, "ln_1"), s, tp),
      std::make_unique<nn::SelfAttention>(nn::child_name(name, "attn"), a, layer, tp, mp.cp),
      norm(nn::child_name(name, "ln_2"), s, tp), std::make_unique<nn::FeedForward>(nn::child_name(name, "mlp"), f, tp));
}

TransformerSpec sized(std::int64_t L, std::int64_t H, std::int64_t D) {
  TransformerSpec s = gpt_like_spec("gpt2", L, H, D);
  s.vocab_size = 50257;
  s.max_seq_len = 1024;
  s.norm_eps = 1e-5;
  return s;
}

// GPT-2's config.json keys of the spec's fields, read in this order.
const std::vector<HfKey>& hf_keys() {
  using S = TransformerSpec;
  static const std::vector<HfKey> keys = {
      {"n_layer", &S::n_layer},
      {"n_head", &S::n_head},
      {"n_embd", &S::d_model},
      {"n_inner", &S::d_ff, [](const S& s) { return 4 * s.d_model; }},
      {"vocab_size", &S::vocab_size},
      {"n_positions", &S::max_seq_len},
      {"layer_norm_epsilon", &S::norm_eps, 1e-5},
      {"resid_pdrop", &S::dropout, 0.0},
      {"attn_pdrop", &S::attention_dropout, 0.0},
      {"initializer_range", &S::init_std, 0.02},
      {"tie_word_embeddings", &S::tie_embeddings, true},  // untied: GPT2LMHeadModel keeps its own lm_head.weight
  };
  return keys;
}

void read_config(const HfConfigReader& c, TransformerSpec& s) {
  read_keys(c, s, hf_keys());
  s.n_kv_head = s.n_head;
  const std::string act = c.get_or<std::string>("activation_function", "gelu_new");
  TRIDENT_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
                "'{}': activation_function '{}' is not supported (trident's GPT-2 uses gelu_new)", c.path(), act);
  // GPT2Attention scales q·k by 1/sqrt(head_dim) only with scale_attn_weights, and further by 1/(layer + 1)
  // with scale_attn_by_inverse_layer_idx; trident's attention always uses 1/sqrt(head_dim).
  // (reorder_and_upcast_attn only changes the precision of the same product, and is accepted.)
  TRIDENT_CHECK(c.get_or<bool>("scale_attn_weights", true),
                "'{}': scale_attn_weights false (unscaled attention scores) is not supported", c.path());
  c.require_false("scale_attn_by_inverse_layer_idx", "trident scales attention scores by 1/sqrt(head_dim) only");
}

void write_config(const TransformerSpec& s, HfConfigWriter& c) {
  write_keys(s, c, hf_keys());
  c.set("activation_function", "gelu_new");
  c.set("n_ctx", s.max_seq_len);
  c.set("embd_pdrop", s.dropout);
}

}  // namespace

Family gpt2_family() {
  Family f;
  f.name = "gpt2";
  f.display_name = "GPT-2";
  f.hf_model_type = "gpt2";
  f.hf_architecture = "GPT2LMHeadModel";
  f.names.token_embedding = "transformer.wte";
  f.names.position_embedding = "transformer.wpe";
  f.names.embed_dropout = "transformer.drop";
  f.names.layers = "transformer.h";
  f.names.final_norm = "transformer.ln_f";
  f.eod_is_bos = true;  // <|endoftext|> begins and ends a document
  f.defaults = [] { return sized(0, 0, 0); };
  f.presets = {
      {"gpt2", [] { return sized(12, 12, 768); }},
      {"gpt2-medium", [] { return sized(24, 16, 1024); }},
      {"gpt2-large", [] { return sized(36, 20, 1280); }},
      {"gpt2-xl", [] { return sized(48, 25, 1600); }},
      {"gpt2-tiny",
       [] {
         TransformerSpec s = sized(2, 4, 64);
         s.vocab_size = 512;
         s.max_seq_len = 128;
         return s;
       }},
      {"gpt2-small-corpus",  // the README's main job on the built-in corpus
       [] {
         TransformerSpec s = sized(4, 4, 256);
         s.vocab_size = 4096;
         s.max_seq_len = 256;
         return s;
       }},
  };
  f.default_d_ff = [](std::int64_t d) { return 4 * d; };
  f.validate = [](const TransformerSpec& s) {
    TRIDENT_CHECK(s.n_kv_head == s.n_head, "model: GPT-2 has no grouped-query attention (n_kv_head={} but n_head={})",
                  s.n_kv_head, s.n_head);
    TRIDENT_CHECK(s.sliding_window == 0,
                  "model.sliding_window={}: GPT-2 attends to every earlier token (a window needs model.arch=mistral)",
                  s.sliding_window);
  };
  f.block_parameters = [](const TransformerSpec& s) {
    const long double D = static_cast<long double>(s.d_model), F = static_cast<long double>(s.d_ff);
    return 2 * D + (3 * D * D + 3 * D) + (D * D + D) + 2 * D + (D * F + F) + (F * D + D);
  };
  f.other_parameters = [](const TransformerSpec& s) { return 2 * static_cast<long double>(s.d_model); };
  f.read_hf_config = read_config;
  f.write_hf_config = write_config;
  f.make_norm = norm;
  f.make_block = block;
  f.hf_names = [](const std::string& name) {
    // Files saved from GPT2Model (OpenAI's weights on the Hub among them) lack GPT2LMHeadModel's prefix.
    constexpr std::string_view prefix = "transformer.";
    if (!name.starts_with(prefix)) return std::vector<std::string>{name};
    return std::vector<std::string>{name, name.substr(prefix.size())};
  };
  return f;
}

}  // namespace trident::models
