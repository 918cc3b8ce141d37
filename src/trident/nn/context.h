// ForwardContext: what a forward pass needs to know beyond its inputs.
//
// Dropout masks are drawn from the counter-based RNG at the *global*
// coordinates of each activation element: (sample index within the global
// batch, token, feature). A micro-batch therefore states where its samples sit
// in the global batch (and, under sequence parallelism, where its tokens sit in
// the sequence), and every data-parallel rank, micro-batch split or
// tensor-parallel shard drops exactly what a single process would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trident/core/rng.h"
#include "trident/autograd/variable.h"
#include "trident/core/tensor.h"
#include "trident/dist/group.h"
#include "trident/parallel/context/sequence.h"

namespace trident::nn {

// Keys and values of past tokens, one entry per layer, for generation.
struct KVCache {
  std::vector<Tensor> keys;    // [B, S, Hkv, head_dim] per layer (undefined until first use)
  std::vector<Tensor> values;
  std::int64_t length = 0;     // tokens already cached
  explicit KVCache(std::size_t layers = 0) : keys(layers), values(layers) {}
};

// What mixture-of-experts layers (nn::MoE) hand to the model's loss: their
// auxiliary losses, already multiplied by their coefficients, and their load
// statistics. The model adds total() to its loss (the layers only append); the
// statistics are for metrics. One sink per forward pass: clear() it (or use a
// fresh one) before the next.
struct AuxLosses {
  struct LayerStats {
    std::string layer;                           // the MoE layer's prefix
    std::int64_t layer_index = 0;                // its block's index in the model
    std::vector<std::int64_t> tokens_per_expert; // routed (token, slot) assignments per expert, before dropping
    std::int64_t assignments = 0;                // tokens · top_k
    std::int64_t dropped = 0;                    // assignments dropped by the capacity (0 when dropless)
    double max_load = 0;                         // max over experts of tokens_per_expert
    double mean_load = 0;                        // assignments / n_experts
    double dropped_fraction() const { return assignments > 0 ? double(dropped) / double(assignments) : 0.0; }
  };
  std::vector<autograd::Variable> losses;  // scalars: load-balancing and z losses, coefficient-scaled
  std::vector<LayerStats> stats;           // one entry per MoE layer per forward pass
  // What `losses` added to the objective, each weighted as the model's loss weighted it (TransformerLM::loss:
  // by the micro-batch's share of the global batch's tokens); summed over the forward passes.
  double weighted_value = 0;

  // The sum of `losses` (an undefined Variable when there are none).
  autograd::Variable total() const;
  void clear() {
    losses.clear();
    stats.clear();
    weighted_value = 0;
  }
};

// What an evaluation counts beside the loss: the labelled positions, and those whose highest logit over the
// whole vocabulary (the argmax across vocabulary-parallel shards) is the label (masked-LM accuracy).
struct PredictionCounts {
  std::int64_t labelled = 0;
  std::int64_t correct = 0;
};

// The context-parallel group of the attention layers (dist::Mesh's cp groups; null: each rank holds whole
// sequences) and its algorithm (parallel/context/attention.h).
struct ContextParallel : dist::Group {
  bool all_to_all = false;  // false: the ring
};

struct ForwardContext;
// With ctx.document_positions: the positions [B, count] (i64, host) of tokens [from, from + count) of the
// sequence, each counted from its document's start (ctx.document_starts). Undefined otherwise.
Tensor document_positions(const ForwardContext& ctx, std::int64_t from, std::int64_t count);

struct ForwardContext {
  bool training = false;
  std::uint64_t seed = 0;
  std::int64_t step = 0;            // global step (dropout masks change every step)
  std::int64_t batch_offset = 0;    // this micro-batch's first sample within the global batch
  std::int64_t global_batch = 0;    // samples in the global batch; 0 = the local batch
  std::int64_t position_offset = 0; // position of the first token (generation with a cache)
  // Sequence parallelism: this rank's activations in the replicated region hold
  // tokens [seq_offset, seq_offset + T_local) of a sequence of seq_global tokens
  // (seq_global 0 = the local activation is the whole sequence).
  std::int64_t seq_offset = 0;
  std::int64_t seq_global = 0;
  DType compute_dtype = DType::f32; // matmuls and activations run in this dtype
  KVCache* cache = nullptr;
  // Where MoE layers append their auxiliary losses and load statistics; null = they are not computed.
  AuxLosses* aux = nullptr;
  // Where the model's loss adds its predictions' counts (TransformerLM::loss); null = not counted.
  PredictionCounts* predictions = nullptr;
  // Encoder inputs beside the token ids (BERT), both [B, T] over the whole sequence, undefined = absent:
  // the token types (segment ids; absent = all 0) and Hugging Face's attention_mask (nonzero = a real
  // token, 0 = padding that no query sees; absent = every key is real).
  // (`= {}` keeps a user's designated initialiser that omits them free of -Wmissing-field-initializers.)
  Tensor token_types = {};
  Tensor key_mask = {};
  // Packed documents (data.reset_attention_mask / reset_position_ids), i32 [B, T] over the whole sequence:
  // the first token of each token's document (data::Batch::document_starts); undefined = one sequence.
  // Attention keeps each token to its document when document_attention is set, and positions (RoPE,
  // learned positions) count from each document's start when document_positions is.
  Tensor document_starts = {};
  bool document_attention = false;
  bool document_positions = false;
  // Context parallelism: this rank's local sequence is its two chunks of the whole (ChunkLayout; inactive:
  // the whole sequence). token_types, key_mask and document_starts stay whole [B, context.seq_len];
  // positions, dropout masks and attention refer to global positions through it.
  parallel::context::ChunkLayout context = {};

  // The RNG of one dropout site ("transformer.h.3.attn.resid") at this step.
  CounterRng dropout_rng(const std::string& site) const {
    return CounterRng(seed, "dropout/" + site).derive(std::to_string(step));
  }
  // The global positions (i64 [count], host) of tokens [from, from + count) of the local sequence (the
  // cp-local one under context parallelism; position_offset counts before them when generating).
  Tensor global_positions(std::int64_t from, std::int64_t count) const;
  // Where a local activation [b, T, ...] sits in the global-batch activation: one slice per run of
  // consecutive global positions (two when context parallelism's chunks meet in it), each covering
  // `length` of its dimension 1 from `local_begin`.
  struct Piece {
    std::int64_t local_begin, length;
    GlobalSlice slice;
  };
  std::vector<Piece> batch_pieces(const Shape& local) const;
  // The one slice of a local activation that holds one run (no context parallelism, or within one chunk).
  GlobalSlice batch_slice(const Shape& local) const {
    Shape global = local;
    std::vector<std::int64_t> offsets(local.rank(), 0);
    if (local.rank() > 0) {
      global[0] = global_batch > 0 ? global_batch : local[0];
      offsets[0] = batch_offset;
    }
    if (local.rank() > 1 && seq_global > 0) {
      global[1] = seq_global;
      offsets[1] = seq_offset;
    }
    return GlobalSlice{global, offsets};
  }
};

}  // namespace trident::nn
