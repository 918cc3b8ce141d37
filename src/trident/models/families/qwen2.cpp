// Qwen2 (Hugging Face Qwen2ForCausalLM): LLaMA's structure with biases on the
// q, k and v projections (not on o_proj), tied or untied embeddings as
// configured, and an optional sliding window on every layer.
#include "trident/models/families/llama_like.h"

namespace trident::models {

namespace {

TransformerSpec sized(std::int64_t L, std::int64_t H, std::int64_t Hkv, std::int64_t D, std::int64_t F) {
  TransformerSpec s = llama_like_spec("qwen2", L, H, Hkv, D, F);
  s.qkv_bias = true;
  s.vocab_size = 151936;
  s.max_seq_len = 32768;
  s.rope.theta = 1000000.0;
  return s;
}

// The sliding window of every layer. Qwen2Config gives each layer a type — sliding_attention from
// layer max_window_layers on when use_sliding_window, else full_attention; transformers 5 writes them
// as layer_types — and trident builds one window for the whole model, so the types must agree.
std::int64_t read_window(const HfConfigReader& c, std::int64_t n_layer) {
  const std::int64_t window = c.get_or<std::int64_t>("sliding_window", 0);
  std::int64_t sliding = 0;  // layers with the window
  if (c.has("layer_types")) {
    for (const std::string& t : c.get<std::vector<std::string>>("layer_types")) {
      TRIDENT_CHECK(t == "full_attention" || t == "sliding_attention",
                    "'{}': layer_types holds '{}' (expected full_attention or sliding_attention)", c.path(), t);
      sliding += t == "sliding_attention";
    }
  } else if (c.get_or<bool>("use_sliding_window", false)) {
    const std::int64_t full = c.get_or<std::int64_t>("max_window_layers", n_layer);
    sliding = std::max<std::int64_t>(0, n_layer - std::max<std::int64_t>(0, full));
  }
  if (sliding == 0) return 0;
  TRIDENT_CHECK(sliding == n_layer,
                "'{}': {} of {} layers use the sliding window (layer_types, or use_sliding_window from "
                "max_window_layers on); trident builds one window for every layer or none",
                c.path(), sliding, n_layer);
  TRIDENT_CHECK(window > 0, "'{}': the layers use a sliding window, but sliding_window is {}", c.path(),
                c.json().contains("sliding_window") ? c.json()["sliding_window"].dump() : "missing");
  return window;
}

}  // namespace

Family qwen2_family() {
  Family f = llama_like_family("qwen2", "Qwen2", "qwen2", "Qwen2ForCausalLM");
  f.eod_is_bos = true;  // Qwen2's files give <|endoftext|> as bos and eos
  f.defaults = [] {
    TransformerSpec s = llama_like_spec("qwen2", 0, 0, 0, 0, 0);
    s.qkv_bias = true;
    return s;
  };
  f.presets = {
      {"qwen2-tiny",
       [] {
         TransformerSpec s = sized(2, 4, 2, 64, 192);
         s.vocab_size = 512;
         s.max_seq_len = 128;
         s.tie_embeddings = true;
         return s;
       }},
      {"qwen2-0.5b",
       [] {
         TransformerSpec s = sized(24, 14, 2, 896, 4864);
         s.tie_embeddings = true;
         return s;
       }},
      {"qwen2-7b",
       [] {
         TransformerSpec s = sized(28, 28, 4, 3584, 18944);
         s.vocab_size = 152064;
         return s;
       }},
  };
  f.validate = [](const TransformerSpec& s) {
    TRIDENT_CHECK(s.head_dim() % 2 == 0, "model: RoPE needs an even head dimension, got {}", s.head_dim());
    TRIDENT_CHECK(s.qkv_bias, "model: Qwen2 always has q/k/v biases");
    TRIDENT_CHECK(s.sliding_window >= 0, "model.sliding_window must be 0 (none) or positive, got {}",
                  s.sliding_window);
  };
  f.read_hf_config = [](const HfConfigReader& c, TransformerSpec& s) {
    read_llama_like_config(c, s, false);
    s.qkv_bias = true;
    s.sliding_window = read_window(c, s.n_layer);
  };
  f.write_hf_config = [](const TransformerSpec& s, HfConfigWriter& c) {
    write_llama_like_config(s, c);
    c.set("use_sliding_window", s.sliding_window > 0);
    c.set("sliding_window", s.sliding_window > 0 ? nlohmann::json(s.sliding_window) : nlohmann::json(nullptr));
    c.set("max_window_layers", s.sliding_window > 0 ? 0 : s.n_layer);
  };
  return f;
}

}  // namespace trident::models
