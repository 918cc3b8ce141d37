// The parts a transformer block is built from: self-attention, the
// feed-forward network and the pre-norm residual block. They know sizes and
// options, never a model family: a family (src/trident/models/families/)
// chooses the options and the names of every sub-layer, so the same parts
// build GPT-2 (fused QKV with biases, GELU MLP), LLaMA (separate q/k/v, RoPE,
// grouped-query attention, SwiGLU), Mistral (a sliding attention window) and
// Qwen2 (q/k/v biases).
//
// Attention runs on [B, T, H, head_dim] tensors straight out of the
// projections (a reshape, no transpose), causal, with an optional KV cache.
//
// Tensor parallelism (t ranks): q/k/v and the MLP's first layers are
// column-parallel, the output projections row-parallel, so each rank computes
// H/t whole heads (Hkv/t whole key/value heads: whole query groups under GQA)
// and F/t hidden units, with one enter/exit of the tensor region each for
// attention and MLP. Under sequence parallelism the block's input and output
// are this rank's T/t slice of the sequence.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "trident/kernels/rope_frequencies.h"
#include "trident/nn/layers.h"

namespace trident::nn {

struct SelfAttentionOptions {
  std::int64_t d_model = 0;
  std::int64_t n_head = 0;
  std::int64_t n_kv_head = 0;  // < n_head: grouped-query attention
  // One [q | k | v] projection (GPT-2's c_attn), each part split by heads
  // separately under tensor parallelism; else three projections.
  bool fused_qkv = false;
  bool qkv_bias = false;
  bool out_bias = false;
  WeightLayout layout = WeightLayout::out_in;
  // Rotary positions on q and k; none when the positions enter elsewhere (learned embeddings).
  std::optional<RopeFrequencies> rope;
  // A query sees only the `window` most recent keys, itself included (0: every earlier key).
  std::int64_t window = 0;
  // false: every query sees every key of its sample (an encoder), except padding (ForwardContext::key_mask).
  bool causal = true;
  double dropout = 0.0;      // on the output, at site <prefix>.resid
  // On the attention probabilities (training only), at site <prefix>.probs: drawn per (global sample,
  // global head, query, key), so every layout drops the same (ops/attention.h).
  double attention_dropout = 0.0;
  double init_std = 0.02;    // q, k, v
  double out_init_std = 0.02;
  // Block-sparse attention (ops::AttentionOptions::block_layout): the layout, u8 [n_head or 1, nb, nb] on the
  // host, shared by the layers (models::set_sparse_attention), and its block size; undefined: dense.
  Tensor block_layout = {};
  std::int64_t block = 0;
  // The sub-layers' names, the family's choice: `qkv` when fused, else `q`, `k`, `v`; then `out`.
  std::string qkv = "qkv", q = "q", k = "k", v = "v", out = "out";

  std::int64_t head_dim() const { return n_head > 0 ? d_model / n_head : 0; }
};

class SelfAttention : public Layer {
 public:
  // `layer_index` is the block's index in the model: its slot in a KV cache.
  // Under context parallelism (cp active) x holds this rank's chunks of each sequence, and attention runs
  // over the whole sequence through parallel/context.
  SelfAttention(std::string prefix, SelfAttentionOptions options, std::int64_t layer_index,
                const TensorParallel& tp = {}, const ContextParallel& cp = {});
  // x [B, T, D] → [B, T, D]
  Variable forward(const Variable& x, const ForwardContext& ctx) const override;

 private:
  SelfAttentionOptions options_;
  std::int64_t layer_;
  TensorParallel tp_;
  ContextParallel cp_;
  mutable Tensor device_layout_;  // options_.block_layout on the device the layer last ran on
  Linear* qkv_ = nullptr;
  Linear* q_ = nullptr;
  Linear* k_ = nullptr;
  Linear* v_ = nullptr;
  Linear* out_ = nullptr;
};

enum class Activation {
  gelu_tanh,  // down(gelu_tanh(up(x)))
  gelu,       // down(gelu(up(x))), the exact (erf) GELU (BERT)
  swiglu,     // down(silu(gate(x)) · up(x))
};

struct FeedForwardOptions {
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;
  Activation activation = Activation::gelu_tanh;
  bool bias = false;
  WeightLayout layout = WeightLayout::out_in;
  double dropout = 0.0;  // on the output, at site <prefix>.resid
  double init_std = 0.02;
  double out_init_std = 0.02;
  // The sub-layers' names: `up` (the first layer), `gate` (SwiGLU only) and `down`.
  std::string up = "up", gate = "gate", down = "down";
};

class FeedForward : public Layer {
 public:
  FeedForward(std::string prefix, FeedForwardOptions options, const TensorParallel& tp = {});
  Variable forward(const Variable& x, const ForwardContext& ctx) const override;

 private:
  FeedForwardOptions options_;
  TensorParallel tp_;
  Linear* up_ = nullptr;
  Linear* gate_ = nullptr;
  Linear* down_ = nullptr;
};

// x + attention(norm1(x)), then h + mlp(norm2(h)): the pre-norm residual block
// of GPT-2, LLaMA and their descendants. The parts are built by the caller
// with their full names; PostNormBlock is the same with the norms after the residual adds.
class PreNormBlock : public Layer {
 public:
  PreNormBlock(std::string prefix, std::unique_ptr<Layer> norm1, std::unique_ptr<Layer> attention,
               std::unique_ptr<Layer> norm2, std::unique_ptr<Layer> mlp);
  Variable forward(const Variable& x, const ForwardContext& ctx) const override;
  Layer& attention() noexcept { return *attention_; }
  Layer& mlp() noexcept { return *mlp_; }

 private:
  Layer* norm1_;
  Layer* attention_;
  Layer* norm2_;
  Layer* mlp_;
};

// h = norm1(x + attention(x)), then norm2(h + mlp(h)): the post-norm residual
// block of the original Transformer and BERT.
class PostNormBlock : public Layer {
 public:
  PostNormBlock(std::string prefix, std::unique_ptr<Layer> attention, std::unique_ptr<Layer> norm1,
                std::unique_ptr<Layer> mlp, std::unique_ptr<Layer> norm2);
  Variable forward(const Variable& x, const ForwardContext& ctx) const override;
  Layer& attention() noexcept { return *attention_; }
  Layer& mlp() noexcept { return *mlp_; }

 private:
  Layer* attention_;
  Layer* norm1_;
  Layer* mlp_;
  Layer* norm2_;
};

}  // namespace trident::nn
