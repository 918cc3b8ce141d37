// The basic layers: Linear, Embedding, LayerNorm, RMSNorm, and dropout.
#pragma once

#include "trident/nn/context.h"
#include "trident/nn/module.h"

namespace trident::nn {

// How a linear layer's weight is stored. torch.nn.Linear (LLaMA, Megatron) keeps
// [out, in]; Hugging Face GPT-2's Conv1D keeps [in, out]. trident keeps the
// canonical layout of the architecture so weights map one to one.
enum class WeightLayout { out_in, in_out };

struct LinearOptions {
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  bool bias = true;
  WeightLayout layout = WeightLayout::out_in;
  double init_std = 0.02;
};

class Linear : public Module {
 public:
  Linear(std::string prefix, const LinearOptions& options);
  // x [..., in] → [..., out], in ctx.compute_dtype.
  Variable forward(const Variable& x, const ForwardContext& ctx) const;
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }

 private:
  LinearOptions options_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
};

class Embedding : public Module {
 public:
  Embedding(std::string prefix, std::int64_t num_embeddings, std::int64_t dim, double init_std = 0.02);
  // ids [...] (i32/i64) → [..., dim] in ctx.compute_dtype.
  Variable forward(const Tensor& ids, const ForwardContext& ctx) const;
  Parameter& weight() { return *weight_; }
  const Parameter& weight() const { return *weight_; }

 private:
  Parameter* weight_ = nullptr;
};

class LayerNorm : public Module {
 public:
  LayerNorm(std::string prefix, std::int64_t dim, double eps, bool bias = true);
  Variable forward(const Variable& x, const ForwardContext& ctx) const;

 private:
  double eps_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
};

class RMSNorm : public Module {
 public:
  RMSNorm(std::string prefix, std::int64_t dim, double eps);
  Variable forward(const Variable& x, const ForwardContext& ctx) const;

 private:
  double eps_;
  Parameter* weight_ = nullptr;
};

// Dropout at a named site with global-coordinate masks; identity when not training or p == 0.
Variable dropout(const Variable& x, double p, const std::string& site, const ForwardContext& ctx);

// The parameter's variable in the compute dtype (a recorded cast when it differs).
Variable compute_view(const Parameter& p, const ForwardContext& ctx);

}  // namespace trident::nn
