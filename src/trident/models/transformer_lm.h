// TransformerLM: a transformer language model of any registered family (family.h) with
// its family's objective: token (and learned position, and token-type) embeddings, the
// family's blocks, a final norm (pre-norm families) and the LM head (through a head
// transform for encoders). A decoder (GPT-2, LLaMA, ...) is trained on the next-token
// cross-entropy; an encoder (BERT) on the masked-LM cross-entropy over its masked
// positions (Family::objective).
//
// Parameter names are the family's canonical names (for the families so far,
// those of their Hugging Face classes, mapped by Family::hf_names). The forward pass is
// exposed in three pieces — embed, block(i), head — so a pipeline stage can
// run just its share of the layers.
//
// With a tensor-parallel group of t > 1 ranks the model holds its shard of
// every layer (nn/tensor_parallel.h): vocabulary-parallel token embedding and
// LM head (vocabulary padded to a multiple of 128·t), column/row-parallel
// attention and MLP, and the loss is the vocabulary-parallel cross-entropy, so
// full logits exist only when asked for (forward(), generation). Under
// sequence parallelism the hidden states between units are this rank's T/t
// slice of the sequence.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trident/models/family.h"
#include "trident/models/spec.h"
#include "trident/models/stage.h"
#include "trident/nn/nn.h"

namespace trident::models {

using autograd::Variable;
using nn::ForwardContext;

class TransformerLM : public nn::Module {
 public:
  explicit TransformerLM(const TransformerSpec& spec, const ModelParallel& parallel = {}, StageRange stage = {});

  const TransformerSpec& spec() const noexcept { return spec_; }
  const Family& family() const noexcept { return *family_; }
  const nn::TensorParallel& tensor_parallel() const noexcept { return tp_; }
  const StageRange& stage() const noexcept { return stage_; }
  bool is_whole() const noexcept {
    return stage_.embed && stage_.head && stage_.first_layer == 0 && stage_.last_layer == spec_.n_layer;
  }
  std::int64_t num_layers() const noexcept { return spec_.n_layer; }

  // ids [B, T] → hidden [B, T, D] (token + learned position embeddings for
  // learned positions); [B, T/t, D], this rank's slice, under sequence parallelism.
  Variable embed(const Tensor& ids, const ForwardContext& ctx) const;
  // Transformer block `i` (global index, within this stage's range; recomputed
  // in backward when activation checkpointing is on).
  Variable block(std::int64_t i, const Variable& h, const ForwardContext& ctx) const;
  // A pipeline stage's share of the forward: the embeddings of `ids` (first
  // stage) or the received hidden state `h`, then this stage's blocks. The last
  // stage continues with head_local and logits_loss.
  Variable stage_forward(const Tensor& ids, const Variable& h, const ForwardContext& ctx) const;
  // Final norm and LM head: hidden [B, T, D] → logits [B, T, V] (gathered over
  // the tensor-parallel group; the vocabulary padding removed).
  Variable head(const Variable& h, const ForwardContext& ctx) const;
  // The same without the gather: this rank's vocabulary slice [B, T, V'/t]
  // (padding columns included), which starts at global id vocab_begin().
  Variable head_local(const Variable& h, const ForwardContext& ctx) const;
  std::int64_t vocab_begin() const noexcept;
  // V' = padded_vocab_size(V, t, spec.vocab_divisible_by): the rows of the
  // vocabulary tables over all ranks, padding included.
  std::int64_t padded_vocab_size() const noexcept { return padded_vocab_; }
  // Cross-entropy of head_local's logits against labels [B, T] (sum divided by
  // normalizer, or the mean when normalizer is 0); vocabulary-parallel under TP,
  // and over the real columns alone when the vocabulary is padded.
  Variable logits_loss(const Variable& local_logits, const Tensor& labels, double normalizer = 0) const;
  // Adds to `counts` the labelled positions of `labels` [B, T] (ignore index -100 left out) and those where
  // the highest of head_local's logits over the real vocabulary is the label: under tensor parallelism the
  // argmax across the shards (the lowest id among equal maxima, as one process picks), so every rank of the
  // group counts the same. A collective over the tensor-parallel group.
  void count_predictions(const Tensor& local_logits, const Tensor& labels, nn::PredictionCounts& counts) const;
  Variable forward(const Tensor& ids, const ForwardContext& ctx) const;
  // The pooled output [B, D] of the last hidden state h [B, T, D] (BertModel's pooler_output), on the
  // last stage of a model built with TransformerSpec::pooler; the whole sequence is needed (no sequence
  // parallelism). Not part of any loss.
  Variable pooled(const Variable& h, const ForwardContext& ctx) const;

  // Sum of token cross-entropies divided by `normalizer` (the global batch's
  // token count), so micro-batch losses add up to the global-batch mean.
  // normalizer 0 = this batch's token count (a plain mean).
  Variable loss(const Tensor& ids, const Tensor& labels, const ForwardContext& ctx, double normalizer = 0) const;

  void set_activation_checkpointing(bool on) noexcept { checkpointing_ = on; }
  // ZeRO-3 (FSDP's fully_shard, applied from outside): from now on each unit's parameters are
  // gathered by `gatherer` around its forward and its recomputation in backward, and released after.
  // Null: the parameters are resident.
  void set_parameter_gatherer(nn::ParameterGatherer* gatherer) noexcept { gatherer_ = gatherer; }
  bool activation_checkpointing() const noexcept { return checkpointing_; }

  // FLOPs per token for forward + backward of the whole model (6·N + 12·L·h·s,
  // the MFU convention; N counts every parameter of the whole model).
  double flops_per_token(std::int64_t seq_len) const;

  // The parameters of each unit ZeRO-3 gathers at once: the embeddings, each
  // block, and the head (final norm and LM head — the token embedding when tied).
  std::vector<nn::Parameter*> embed_parameters() const;
  std::vector<nn::Parameter*> block_parameters(std::int64_t i) const;
  std::vector<nn::Parameter*> head_parameters() const;
  // The token embedding this stage holds (the input embedding, or on the last
  // stage of a tied model its copy used as the LM head); null when none.
  nn::Parameter* token_embedding() const noexcept { return wte_ ? &wte_->weight() : nullptr; }

 private:
  Variable embed_impl(const Tensor& ids, const ForwardContext& ctx) const;
  Variable head_impl(const Variable& h, const ForwardContext& ctx) const;
  Variable hidden(const Tensor& ids, const ForwardContext& ctx) const;  // embed and every block
  // Runs fn(inputs) as one unit: with a gatherer, its parameters are gathered
  // around it and (when training with grad) it is recomputed in backward;
  // with activation checkpointing it is recomputed in backward.
  Variable run_unit(std::vector<nn::Parameter*> params, const std::vector<Variable>& inputs, bool recompute,
                    const ForwardContext& ctx,
                    const std::function<Variable(const std::vector<Variable>&)>& fn) const;
  // run_unit for a unit with several outputs (a block and its MoE layers' auxiliary loss).
  std::vector<Variable> run_unit_outputs(std::vector<nn::Parameter*> params, const std::vector<Variable>& inputs,
                                         bool recompute, const ForwardContext& ctx,
                                         const std::function<std::vector<Variable>(const std::vector<Variable>&)>& fn) const;

  TransformerSpec spec_;
  const Family* family_;
  nn::TensorParallel tp_;
  nn::ContextParallel cp_;
  std::int64_t padded_vocab_ = 0;
  // The vocabulary tables are sharded or padded (padded_vocab_ != V): head and loss skip the padding.
  bool vocab_split_ = false;
  nn::Embedding* wte_ = nullptr;
  nn::Embedding* wpe_ = nullptr;
  nn::Embedding* wtte_ = nullptr;      // token types (encoders)
  nn::Layer* embed_norm_ = nullptr;    // on the summed embeddings (encoders)
  std::vector<nn::Layer*> blocks_;
  nn::Layer* final_norm_ = nullptr;    // null for post-norm families
  nn::Layer* pooler_ = nullptr;
  nn::Layer* head_transform_ = nullptr;
  nn::Parameter* lm_head_ = nullptr;  // null when tied to the token embedding
  nn::Parameter* head_bias_ = nullptr;
  StageRange stage_;
  bool checkpointing_ = false;
  nn::ParameterGatherer* gatherer_ = nullptr;
};

// The name before it built encoders too; kept so programs written against it still compile.
using CausalLM [[deprecated("renamed trident::models::TransformerLM")]] = TransformerLM;

}  // namespace trident::models
