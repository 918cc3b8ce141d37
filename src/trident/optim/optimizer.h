// Optimisers over nn::Parameters, with fp32 master weights: the base every
// optimiser derives from, and RuleOptimizer, which applies any registered
// update rule (optim/registry.h) to whole parameters — AdamW and SGD are two
// registry entries, and the classes of those names are RuleOptimizers made
// from their options.
//
// Parameters hold the master copy (f32, or f64 in tests); mixed precision
// casts them to the compute dtype inside the forward pass, so gradients
// arrive here in the master dtype. Optimiser state is allocated lazily, in the
// master dtype, and exposed by canonical name ("<state>/<parameter>") for
// checkpoints.
//
// A parameter without a gradient (one no loss reached this step: an expert no
// token chose, BERT's pooler under the MLM loss) is updated as if its gradient
// were zero — its moments decay, weight decay applies — as data parallelism's
// gradient buffers and ZeRO's reduced shards make it anyway: every layout
// updates the same parameters the same way (Megatron's choice; PyTorch's
// optimisers skip a None gradient instead).
//
// step(lr, grad_scale) multiplies every gradient by grad_scale first — the
// product of the global-norm clipping coefficient and 1/loss_scale — inside
// the fused update, so neither clipping nor un-scaling costs a pass.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trident/nn/module.h"
#include "trident/optim/registry.h"

namespace trident::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<nn::Parameter*> params);
  virtual ~Optimizer() = default;

  // One update of every parameter.
  virtual void step(double lr, double grad_scale = 1.0) = 0;
  // Zeroes the gradients before a step's first micro-batch.
  virtual void zero_grad();
  std::int64_t steps_taken() const noexcept { return step_; }
  const std::vector<nn::Parameter*>& params() const noexcept { return params_; }

  // Optimiser state by name ("exp_avg/<param>", ...) held by this rank; set_step restores the count.
  virtual std::map<std::string, Tensor> state() const = 0;
  virtual void load_state(const std::map<std::string, Tensor>& state) = 0;
  virtual void set_step(std::int64_t step) { step_ = step; }
  // New hyperparameters for the same optimizer (a schedule that cycles the momentum); the state is kept.
  virtual void set_method(Method method) = 0;

 protected:
  std::vector<nn::Parameter*> params_;
  std::int64_t step_ = 0;
};

// A registered optimiser (its Method) over whole, replicated parameters.
class RuleOptimizer : public Optimizer {
 public:
  RuleOptimizer(std::vector<nn::Parameter*> params, Method method);
  void step(double lr, double grad_scale = 1.0) override;
  std::map<std::string, Tensor> state() const override;
  void load_state(const std::map<std::string, Tensor>& state) override;
  void set_method(Method method) override;
  const Method& method() const noexcept { return method_; }

 private:
  Method method_;
  std::vector<std::vector<Tensor>> state_;  // [parameter][OptimizerDef::states]; empty until a step or a load
};

class AdamW final : public RuleOptimizer {
 public:
  AdamW(std::vector<nn::Parameter*> params, AdamWOptions options) : RuleOptimizer(std::move(params), options) {}
};

class SGD final : public RuleOptimizer {
 public:
  SGD(std::vector<nn::Parameter*> params, SGDOptions options) : RuleOptimizer(std::move(params), options) {}
};

// Sum of squares of the gradients (f64, deterministic) of `params`; each rank
// sums what it owns and the distributed runtime reduces over the right groups.
double grad_sum_of_squares(const std::vector<nn::Parameter*>& params);
// True when any gradient holds an Inf or NaN.
bool grads_have_inf_or_nan(const std::vector<nn::Parameter*>& params);
// The global-norm clipping coefficient min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0.
double clip_coefficient(double total_norm, double max_norm);

}  // namespace trident::optim
