// The basic layers: Linear (plain, column- and row-parallel), Embedding (plain
// and vocabulary-parallel), LayerNorm, RMSNorm, and dropout.
#pragma once

#include "trident/nn/context.h"
#include "trident/nn/module.h"
#include "trident/nn/tensor_parallel.h"

namespace trident::nn {

// How a linear layer's weight is stored. torch.nn.Linear (LLaMA, Megatron) keeps
// [out, in]; Hugging Face GPT-2's Conv1D keeps [in, out]. A model family picks
// the layout its Hugging Face files use, so weights map one to one.
enum class WeightLayout { out_in, in_out };

// Megatron's intra-layer split of a linear layer over a tensor-parallel group of t ranks:
//   none:   replicated; it runs in the replicated region (its gradient is
//           all-reduced over the group under sequence parallelism).
//   column: each rank holds out/t outputs (weight and bias); input full, output split.
//   row:    each rank holds in/t inputs; input split, output reduced over the
//           group, then the (replicated) bias is added once.
enum class LinearParallel { none, column, row };

struct LinearOptions {
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  bool bias = true;
  WeightLayout layout = WeightLayout::out_in;
  double init_std = 0.02;
  LinearParallel parallel = LinearParallel::none;
  // Column: fused outputs split separately (GPT-2's c_attn is {D, D, D}, so a
  // rank holds whole heads of q, k and v); empty = one segment.
  std::vector<std::int64_t> out_segments = {};
  // Column: all-gather the split output back to [..., out] (one segment only).
  bool gather_output = false;
};

class Linear : public Module {
 public:
  Linear(std::string prefix, const LinearOptions& options, const TensorParallel& tp = {});
  // x [..., in] → [..., out] in ctx.compute_dtype. Column-parallel: x is in the
  // replicated region and enters the tensor region here; output [..., out/t]
  // (or gathered). Row-parallel: x [..., in/t]; output [..., out] in the
  // replicated region (this rank's sequence slice under sequence parallelism).
  Variable forward(const Variable& x, const ForwardContext& ctx) const;
  // Column-parallel with x already in the tensor region (several layers reading
  // one input — q, k, v; gate, up — share one enter_tp_region). Without the
  // bias, for a consumer that adds it itself (bias_view: this rank's share of
  // it in the compute dtype; the GELU of Megatron's bias-GELU fusion).
  Variable forward_in_region(const Variable& x, const ForwardContext& ctx, bool with_bias = true) const;
  Variable bias_view(const ForwardContext& ctx) const;

  const LinearOptions& options() const noexcept { return options_; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }

 private:
  Variable local(const Variable& x, const ForwardContext& ctx, bool with_bias) const;

  LinearOptions options_;
  TensorParallel tp_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
};

LinearOptions with_parallel(LinearOptions options, LinearParallel parallel);

class ColumnParallelLinear : public Linear {
 public:
  ColumnParallelLinear(std::string prefix, LinearOptions options, const TensorParallel& tp)
      : Linear(std::move(prefix), with_parallel(std::move(options), LinearParallel::column), tp) {}
};

class RowParallelLinear : public Linear {
 public:
  RowParallelLinear(std::string prefix, LinearOptions options, const TensorParallel& tp)
      : Linear(std::move(prefix), with_parallel(std::move(options), LinearParallel::row), tp) {}
};

// A table of vectors. With `vocab_parallel` (Megatron's VocabParallelEmbedding)
// the rows are padded to V' = padded_vocab_size(V, t, vocab_divisible_by) (the
// pad rows are zero, never looked up, and absent from checkpoints and exports)
// and rank r of t holds padded rows [r·V'/t, (r+1)·V'/t): an id outside them
// reads as zeros, and the lookups are summed over the group (reduce-scattered
// along the sequence under sequence parallelism); with t = 1 and V' = V it is a
// plain table. Otherwise the table is replicated (GPT-2's position embeddings).
class Embedding : public Module {
 public:
  Embedding(std::string prefix, std::int64_t num_embeddings, std::int64_t dim, double init_std = 0.02,
            const TensorParallel& tp = {}, bool vocab_parallel = false, std::int64_t vocab_divisible_by = 128);
  // ids [...] (i32/i64) → [..., dim] in ctx.compute_dtype.
  Variable forward(const Tensor& ids, const ForwardContext& ctx) const;
  Parameter& weight() { return *weight_; }
  const Parameter& weight() const { return *weight_; }
  // The rows this rank holds: [row_begin, row_begin + local rows), padding included.
  std::int64_t row_begin() const noexcept { return row_begin_; }
  std::int64_t num_embeddings() const noexcept { return num_embeddings_; }

 private:
  TensorParallel tp_;
  bool vocab_parallel_;
  std::int64_t num_embeddings_;
  std::int64_t row_begin_ = 0;
  Parameter* weight_ = nullptr;
};

// A module with one input and one output: norms, attention, feed-forward
// networks and whole blocks. A model family composes its blocks from these
// (docs/architecture.md, "Adding a model family").
class Layer : public Module {
 public:
  using Module::Module;
  virtual Variable forward(const Variable& x, const ForwardContext& ctx) const = 0;
};

// The name of child `name` of the module named `prefix` ("h.0" + "attn" → "h.0.attn").
inline std::string child_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

class LayerNorm : public Layer {
 public:
  LayerNorm(std::string prefix, std::int64_t dim, double eps, bool bias = true, const TensorParallel& tp = {});
  Variable forward(const Variable& x, const ForwardContext& ctx) const override;

 private:
  double eps_;
  TensorParallel tp_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
};

class RMSNorm : public Layer {
 public:
  RMSNorm(std::string prefix, std::int64_t dim, double eps, const TensorParallel& tp = {});
  Variable forward(const Variable& x, const ForwardContext& ctx) const override;

 private:
  double eps_;
  TensorParallel tp_;
  Parameter* weight_ = nullptr;
};

// Dropout at a named site with global-coordinate masks; identity when not training or p == 0.
Variable dropout(const Variable& x, double p, const std::string& site, const ForwardContext& ctx);

// The parameter's variable in the compute dtype (a recorded cast when it differs).
Variable compute_view(const Parameter& p, const ForwardContext& ctx);

}  // namespace trident::nn
