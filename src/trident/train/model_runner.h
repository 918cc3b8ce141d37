// Internal to the train module: what one rank computes in a step. Without
// pipeline parallelism, the whole model (or its tensor-parallel shard) runs
// the step's micro-batches one after another, accumulating gradients. With
// it, the rank holds its model chunks — chunk c is virtual stage c·p + r of
// the v·p stages the layers are partitioned into — and walks the schedule's
// instruction list (parallel/pipeline) through the executor.
//
// Either way a step ends with the same reductions: data-parallel gradients
// (GradSync, overlapped with the last backward where the schedule allows, or
// ZeRO's reduce-scatter), and under PP with tied embeddings the all-reduce of
// the token embedding's gradient between the first stage (input embedding)
// and the last (its copy used as the LM head) — so the two copies receive the
// same update and stay bitwise equal.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "trident/data/dataset/loader.h"
#include "trident/models/transformer_lm.h"
#include "trident/parallel/pipeline/executor.h"
#include "trident/parallel/pipeline/schedule.h"
#include "trident/train/parallel_state.h"

namespace trident::train::detail {

class ModelRunner {
 public:
  // The micro-batch m of a step (0-based) and the forward context it runs with.
  using NextBatch = std::function<data::Batch()>;
  using ContextOf = std::function<nn::ForwardContext(std::int64_t m)>;

  struct Options {
    std::vector<std::int64_t> stage_layers;  // dist.pipeline_num_layers (empty: even split)
    parallel::pipeline::Schedule schedule = parallel::pipeline::Schedule::one_f_one_b;
    std::int64_t micro_batch_size = 1;       // with seq_len and dtype: the shape of stage boundaries
    std::int64_t seq_len = 1;
    DType compute_dtype = DType::f32;
    Device device = Device::cpu();           // where parameters and activations live
    // The micro-batches carry attention masks — key masks (padded samples, data::Batch::key_mask) or
    // document starts (data::Batch::document_starts) — which every stage's attention reads: middle
    // pipeline stages read micro-batches too.
    bool attention_masks = false;
    // With document starts: attention stays within each document (data.reset_attention_mask), positions
    // restart at each (data.reset_position_ids); nn::ForwardContext's flags.
    bool document_attention = false;
    bool document_positions = false;
  };
  // Builds this rank's chunks (uninitialised): layers split over
  // pipeline_parallel_size × virtual_pipeline_size virtual stages, evenly or
  // by dist.pipeline_num_layers.
  ModelRunner(const models::TransformerSpec& spec, ParallelState& par, Options options);

  const std::vector<std::unique_ptr<models::TransformerLM>>& chunks() const noexcept { return chunks_; }
  // Every parameter of every chunk.
  const std::vector<nn::Parameter*>& parameters() const noexcept { return params_; }
  // This rank reads micro-batches: it hosts the first virtual stage (token ids) or the last (labels).
  // With attention masks, every stage does.
  bool reads_data() const noexcept {
    return !par_.pipelined() || par_.first_stage() || par_.last_stage() || options_.attention_masks;
  }

  // Forward and backward of `micro_batches` micro-batches (each loss divided by
  // `normalizer`, backward of loss × loss_scale), then the gradient
  // reductions. Returns the step's loss: the sum over micro-batches and
  // data-parallel ranks, the same on every rank.
  //
  // `stop_before(m)`, when given, is asked before each micro-batch m >= 1 of
  // a step without a pipeline and must answer the same on every rank (it
  // agrees over the world): true abandons the step there — the gradients are
  // partial, no reduction runs, the parameters and optimizer are untouched —
  // and train_step returns nullopt. Under a pipeline schedule the micro-batches
  // of different stages interleave, so there is no point at which every rank
  // has finished the same micro-batches; the step runs to its end (bounded by
  // the accumulation bound) and the stop happens at the step boundary.
  using StopBefore = std::function<bool(std::int64_t m)>;
  std::optional<double> train_step(std::int64_t micro_batches, const NextBatch& next, const ContextOf& context,
                                   double normalizer, double loss_scale, const StopBefore& stop_before = {});
  // Loss of `batches` micro-batches per data-parallel rank (no grad): the sum of
  // every label's loss over all of them, divided by `normalizer` (the labels
  // they train, over all ranks); the same on every rank.
  double evaluate(std::int64_t batches, const NextBatch& next, const ContextOf& context, double normalizer);

  // The squared norm of the whole model's gradient: tensor-parallel shards
  // summed over TP, replicated parameters counted once, stages summed over PP
  // (the tied embedding copy counted once).
  double grad_sum_of_squares();
  // The mixture-of-experts layers' auxiliary losses and load statistics of this rank's last train_step:
  // empty for a dense model; under a pipeline, those of this rank's stages' layers (each stage's
  // auxiliary loss leaves it beside its activation; the step's statistics sum them over the data-parallel
  // ranks and the pipeline, train/step.cpp).
  const nn::AuxLosses& step_aux() const noexcept { return step_aux_; }

 private:
  // Puts micro-batch b's attention masks into ctx (key mask, documents and what they govern).
  void set_masks(nn::ForwardContext& ctx, const data::Batch& b) const;
  // Context parallelism: this rank's chunks of a micro-batch's sequences (tokens and labels; the masks stay
  // whole), the chunk layout, and a micro-batch's forward context with it.
  data::Batch own_chunks(data::Batch b) const;
  parallel::context::ChunkLayout chunk_layout() const;
  nn::ForwardContext context_of(const ContextOf& context, std::int64_t m) const;
  // The pipeline: one step's instructions through the executor.
  double pipeline_pass(const std::vector<parallel::pipeline::Instruction>& list, std::int64_t micro_batches,
                       const NextBatch& next, const ContextOf& context, double normalizer, double loss_scale);
  void reduce_gradients();
  void all_reduce_tied_embeddings();

  ParallelState& par_;
  models::TransformerSpec spec_;
  Options options_;
  parallel::pipeline::Boundary boundary_;
  std::vector<std::unique_ptr<models::TransformerLM>> chunks_;
  std::vector<nn::Parameter*> params_;
  std::unique_ptr<parallel::pipeline::Executor> executor_;
  nn::AuxLosses step_aux_;
};

}  // namespace trident::train::detail
