// TransformerSpec: the sizes and options of a transformer language model, and the
// family (models/family.h) that says how they become layers.
//
// The fields are what every family shares (sizes, norm epsilon, RoPE,
// tying) plus the options some families use (q/k/v biases, a sliding attention
// window); a family rejects an option it does not build. The family's own
// files read and write these from Hugging Face's config.json. A field that a
// model.* key sets, or that a resume must match, has a row in the table of
// model options (train/config/model_options.cpp; docs/architecture.md, "Adding a
// model option").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trident/kernels/rope_frequencies.h"
#include "trident/models/sparse_attention.h"

namespace trident::models {

struct TransformerSpec {
  std::string family = "gpt2";  // a registered family (models/families/registry.cpp lists them)
  std::int64_t n_layer = 0;
  std::int64_t n_head = 0;
  std::int64_t n_kv_head = 0;
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;
  std::int64_t vocab_size = 0;
  // The vocabulary-sized tables (embeddings, LM head) hold vocab_size rounded up to a multiple of this
  // times the tensor-parallel size (Megatron's make-vocab-size-divisible-by): aligned GEMM shapes, and
  // equal shards. The padding rows are never looked up, their logits never count, and checkpoints and
  // exports leave them out, so the model computes the same function for any value; 1: no padding at tp=1.
  std::int64_t vocab_divisible_by = 128;
  std::int64_t max_seq_len = 0;
  double dropout = 0.0;            // on the embeddings and each block's two residual branches
  double attention_dropout = 0.0;  // on the attention probabilities (BERT's attention_probs_dropout_prob)
  double norm_eps = 1e-5;
  RopeFrequencies rope;  // RoPE's base theta and its optional long-context scaling (families with RoPE)
  bool tie_embeddings = true;
  bool qkv_bias = false;           // biases on the q, k and v projections (Qwen2)
  std::int64_t sliding_window = 0; // each query sees this many most recent keys, itself included; 0 = all (Mistral)
  std::int64_t type_vocab_size = 0; // token-type (segment) embeddings (BERT); 0 = none
  bool pooler = false;              // the pooled first-token output (BertModel's pooler)
  // Block-sparse attention in every layer (DeepSpeed's sparse_attention; models/sparse_attention.h);
  // mode "" = dense attention.
  SparseAttentionSpec sparse_attention = {};
  // Mixture of experts (families whose Family::moe is set: Mixtral): each block's MLP is an nn::MoE of
  // n_experts SwiGLU experts of width d_ff, experts_per_token of them per token.
  std::int64_t n_experts = 0;
  std::int64_t experts_per_token = 0;
  double moe_aux_loss_coef = 0.0;      // the load-balancing loss's coefficient (Switch form, per layer)
  double moe_z_loss_coef = 0.0;        // the router z-loss's coefficient
  double moe_capacity_factor = 0.0;    // 0: dropless; > 0: at most ceil(factor · tokens · k / n_experts) per expert
  std::int64_t moe_d_ff = 0;           // each expert's width; 0: d_ff (Mixtral); Qwen2-MoE's moe_intermediate_size
  std::int64_t moe_shared_d_ff = 0;    // a shared expert every token passes through, gated (Qwen2-MoE); 0: none
  bool moe_norm_topk_prob = true;      // renormalise the chosen experts' weights to sum to 1
  std::int64_t expert_d_ff() const { return moe_d_ff > 0 ? moe_d_ff : d_ff; }
  double init_std = 0.02;
  // Metadata for Hugging Face's config.json (generation stops at an eos id); unused by the layers.
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;

  std::int64_t head_dim() const { return n_head > 0 ? d_model / n_head : 0; }
  // Parameters of the whole (unsharded) model, counted from the layout the family builds.
  std::int64_t num_parameters() const;
  // Parameters one token passes through: an MoE layer runs experts_per_token of its n_experts (the
  // count that FLOPs per token follow; num_parameters() without MoE).
  std::int64_t active_parameters() const;
  // Throws with a clear message when the sizes are inconsistent or the family does not build an option.
  void validate() const;
  // Throws unless heads, key/value heads and d_ff divide over `tp` ranks.
  void validate_tensor_parallel(int tp) const;
  // Throws unless `ep` expert-parallel ranks split each MoE layer's experts evenly.
  void validate_expert_parallel(int ep) const;
  // Throws unless the model runs split over `cp` context-parallel ranks: the all-to-all algorithm scatters
  // each tensor-parallel rank's heads (query and key/value) over them; capacity-bounded experts drop by the
  // whole micro-batch's token order, so they need cp = 1.
  void validate_context_parallel(int cp, int tp, bool all_to_all) const;
};

}  // namespace trident::models
