// The decoder-only transformer's parts, for the GPT-2 and LLaMA families.
//
//   GPT-2: pre-LayerNorm blocks, fused QKV (Conv1D layout [in, out]) with
//          biases, learned positions, GELU (tanh) MLP, tied embeddings.
//   LLaMA: pre-RMSNorm blocks, separate q/k/v/o projections without biases,
//          RoPE, grouped-query attention, SwiGLU MLP, untied head.
//
// Attention runs on [B, T, H, head_dim] tensors straight out of the
// projections (a reshape, no transpose), causal, with an optional KV cache.
//
// Tensor parallelism (t ranks): q/k/v (c_attn) and the MLP's first layers are
// column-parallel, the output projections row-parallel, so each rank computes
// H/t whole heads (Hkv/t whole key/value heads: whole query groups under GQA)
// and F/t hidden units, with one enter/exit of the tensor region each for
// attention and MLP. Under sequence parallelism the block's input and output
// are this rank's T/t slice of the sequence.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "trident/kernels/rope_frequencies.h"
#include "trident/nn/layers.h"

namespace trident::nn {

enum class Arch { gpt2, llama };

struct TransformerSpec {
  Arch arch = Arch::gpt2;
  std::int64_t n_layer = 0;
  std::int64_t n_head = 0;
  std::int64_t n_kv_head = 0;
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;
  std::int64_t vocab_size = 0;
  std::int64_t max_seq_len = 0;
  double dropout = 0.0;
  double norm_eps = 1e-5;
  RopeFrequencies rope;  // LLaMA: RoPE's base theta and its optional long-context scaling
  bool tie_embeddings = true;
  double init_std = 0.02;
  // Metadata for Hugging Face's config.json (generation stops at an eos id); unused by the layers.
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;

  std::int64_t head_dim() const { return d_model / n_head; }
  // Parameters of the whole (unsharded) model, counted from the sizes alone.
  std::int64_t num_parameters() const;
  // Throws with a clear message when the sizes are inconsistent.
  void validate() const;
  // Throws unless heads, key/value heads and d_ff divide over `tp` ranks.
  void validate_tensor_parallel(int tp) const;
};

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(std::string prefix, const TransformerSpec& spec, std::int64_t layer_index,
                      const TensorParallel& tp = {});
  // x [B, T, D] → [B, T, D]
  Variable forward(const Variable& x, const ForwardContext& ctx) const;

 private:
  TransformerSpec spec_;
  std::int64_t layer_;
  TensorParallel tp_;
  Linear* qkv_ = nullptr;  // GPT-2 c_attn
  Linear* q_ = nullptr;    // LLaMA
  Linear* k_ = nullptr;
  Linear* v_ = nullptr;
  Linear* out_ = nullptr;  // c_proj / o_proj
};

class MLP : public Module {
 public:
  MLP(std::string prefix, const TransformerSpec& spec, const TensorParallel& tp = {});
  Variable forward(const Variable& x, const ForwardContext& ctx) const;

 private:
  TransformerSpec spec_;
  TensorParallel tp_;
  Linear* fc_ = nullptr;    // GPT-2 c_fc
  Linear* gate_ = nullptr;  // LLaMA gate_proj
  Linear* up_ = nullptr;    // LLaMA up_proj
  Linear* down_ = nullptr;  // c_proj / down_proj
};

class TransformerBlock : public Module {
 public:
  TransformerBlock(std::string prefix, const TransformerSpec& spec, std::int64_t layer_index,
                   const TensorParallel& tp = {});
  Variable forward(const Variable& x, const ForwardContext& ctx) const;

 private:
  TransformerSpec spec_;
  Module* norm1_ = nullptr;
  Module* norm2_ = nullptr;
  CausalSelfAttention* attn_ = nullptr;
  MLP* mlp_ = nullptr;
  Variable norm(const Module* m, const Variable& x, const ForwardContext& ctx) const;
};

}  // namespace trident::nn
