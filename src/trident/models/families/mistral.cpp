// Mistral (Hugging Face MistralForCausalLM): LLaMA's structure with a sliding
// attention window — each query sees the `sliding_window` most recent keys,
// itself included (config.json sliding_window; null = every earlier key).
#include "trident/models/families/llama_like.h"

namespace trident::models {

namespace {

TransformerSpec sized(std::int64_t L, std::int64_t H, std::int64_t Hkv, std::int64_t D, std::int64_t F,
                      std::int64_t window) {
  TransformerSpec s = llama_like_spec("mistral", L, H, Hkv, D, F);
  s.sliding_window = window;
  return s;
}

}  // namespace

Family mistral_family() {
  Family f = llama_like_family("mistral", "Mistral", "mistral", "MistralForCausalLM");
  f.presets = {
      {"mistral-tiny",
       [] {
         TransformerSpec s = sized(2, 4, 2, 64, 192, 16);
         s.vocab_size = 512;
         s.max_seq_len = 128;
         return s;
       }},
      {"mistral-7b",  // Mistral 7B v0.1
       [] {
         TransformerSpec s = sized(32, 32, 8, 4096, 14336, 4096);
         s.max_seq_len = 32768;
         return s;
       }},
  };
  f.validate = [](const TransformerSpec& s) {
    TRIDENT_CHECK(s.head_dim() % 2 == 0, "model: RoPE needs an even head dimension, got {}", s.head_dim());
    TRIDENT_CHECK(!s.qkv_bias, "model: Mistral has no q/k/v biases");
    TRIDENT_CHECK(s.sliding_window >= 0, "model.sliding_window must be 0 (none) or positive, got {}",
                  s.sliding_window);
  };
  f.read_hf_config = [](const HfConfigReader& c, TransformerSpec& s) {
    read_llama_like_config(c, s, false);
    s.sliding_window = c.get_or<std::int64_t>("sliding_window", 0);
    TRIDENT_CHECK(s.sliding_window >= 0, "'{}': sliding_window must be null or positive, got {}", c.path(),
                  s.sliding_window);
  };
  f.write_hf_config = [](const TransformerSpec& s, HfConfigWriter& c) {
    write_llama_like_config(s, c);
    c.set("sliding_window", s.sliding_window > 0 ? nlohmann::json(s.sliding_window) : nlohmann::json(nullptr));
  };
  return f;
}

}  // namespace trident::models
