// What the LLaMA-shaped families share (LLaMA, Mistral, Qwen2): pre-RMSNorm
// blocks, separate q/k/v/o projections in [out, in] layout, RoPE, grouped-query
// attention, a SwiGLU MLP, and the config.json keys of LlamaConfig. A family
// built on it (models/families/mistral.cpp, qwen2.cpp) starts from
// llama_like_family() and changes what differs.
#pragma once

#include "trident/models/family.h"
#include "trident/models/hf_config.h"
#include "trident/nn/moe.h"
#include "trident/nn/transformer.h"

namespace trident::models {

// A family named `name` with LLaMA's structure, names, config keys and validation.
Family llama_like_family(const std::string& name, const std::string& display_name, const std::string& hf_model_type,
                         const std::string& hf_architecture);

// A LLaMA-shaped spec of the given sizes (vocabulary 32000, context 2048, eps 1e-6, untied).
TransformerSpec llama_like_spec(const std::string& family, std::int64_t L, std::int64_t H, std::int64_t Hkv,
                                std::int64_t D, std::int64_t F);

// The pieces of a LLaMA block, for families that change one of them (Mixtral's MoE MLP): the RMSNorm,
// the attention (q_proj, k_proj, v_proj, o_proj; RoPE, GQA, the sliding window) and the SwiGLU MLP
// (gate_proj, up_proj, down_proj).
std::unique_ptr<nn::Layer> llama_like_norm(const std::string& name, const TransformerSpec& s,
                                           const nn::TensorParallel& tp);
nn::SelfAttentionOptions llama_like_attention(const TransformerSpec& s);
nn::FeedForwardOptions llama_like_mlp(const TransformerSpec& s);
// A LLaMA block whose MLP is an nn::MoE named `moe` (Mixtral: block_sparse_moe; Qwen2-MoE: mlp), and
// nn::MoE's options from the spec's MoE fields (the sub-layers' names are the family's to set). The
// load-balancing coefficient is scaled by top_k so that a layer's value is transformers'.
std::unique_ptr<nn::Layer> llama_like_moe_block(const std::string& name, const TransformerSpec& s, std::int64_t layer,
                                                const ModelParallel& mp, const std::string& moe,
                                                const nn::MoEOptions& options);
nn::MoEOptions llama_like_moe_options(const TransformerSpec& s);
// Parameters of one MoE block's MLP part: router, experts and the shared expert with its gate.
long double moe_parameters(const TransformerSpec& s);

// Parameters of the block's attention and its two norms (Family::block_parameters without the MLP).
long double llama_like_attention_parameters(const TransformerSpec& s);

// LlamaConfig's keys shared by the family's descendants (sizes, rms_norm_eps, RoPE, hidden_act, tying).
void read_llama_like_config(const HfConfigReader& c, TransformerSpec& s, bool tie_default);
void write_llama_like_config(const TransformerSpec& s, HfConfigWriter& c);

}  // namespace trident::models
