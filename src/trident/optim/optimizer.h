// Optimisers over nn::Parameters: AdamW and SGD with fp32 master weights.
//
// Parameters hold the master copy (f32, or f64 in tests); mixed precision
// casts them to the compute dtype inside the forward pass, so gradients
// arrive here in the master dtype. Optimiser state is allocated lazily, in the
// master dtype, and exposed by canonical name for checkpoints.
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
//
// The interface also covers optimisers whose state is partitioned over the
// data-parallel ranks (parallel::ZeroOptimizer): they reduce the gradients
// after each micro-batch (reduce_gradients), measure the gradient norm over
// the group (grad_sum_of_squares) and save and restore only the rows they own
// (owned_state, load_owned_state). A replicated optimiser's defaults do
// nothing there, measure locally and own every row.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trident/nn/module.h"

namespace trident::optim {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // applied to parameters with weight_decay = true only
};

struct SGDOptions {
  double momentum = 0.9;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<nn::Parameter*> params);
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient.
  virtual void step(double lr, double grad_scale = 1.0) = 0;
  // Zeroes the gradients before a step's first micro-batch.
  virtual void zero_grad();
  // After each micro-batch's backward (`last`: the step's final one): an
  // optimiser that partitions gradients over data-parallel ranks reduces them
  // here. The default does nothing.
  virtual void reduce_gradients(bool last) { (void)last; }
  // Sum of squares of the gradients of `subset` as step() will use them (a
  // partitioned optimiser: its reduced rows, summed over its group, so every
  // rank gets the total). The default is optim::grad_sum_of_squares(subset).
  virtual double grad_sum_of_squares(const std::vector<nn::Parameter*>& subset);
  std::int64_t steps_taken() const noexcept { return step_; }
  const std::vector<nn::Parameter*>& params() const noexcept { return params_; }

  // Optimiser state by name ("exp_avg/<param>", ...) held by this rank; set_step restores the count.
  virtual std::map<std::string, Tensor> state() const = 0;
  virtual void load_state(const std::map<std::string, Tensor>& state) = 0;
  virtual void set_step(std::int64_t step) { step_ = step; }

  // For checkpoints in global coordinates: a piece of state and the first row
  // of its parameter that it holds.
  struct Shard {
    Tensor data;
    std::int64_t row_offset = 0;
  };
  // True when each data-parallel rank holds its own rows of the state (every
  // rank writes its part); false when the state is replicated.
  virtual bool partitioned() const noexcept { return false; }
  // The state this rank holds, by key; the default is state() at row 0.
  virtual std::map<std::string, Shard> owned_state() const;
  // Reads rows [row_begin, row_begin + rows) of the state `key` (in global
  // coordinates of the parameter's first dimension) in `dtype`.
  using ReadRows =
      std::function<Tensor(const std::string& key, std::int64_t row_begin, std::int64_t rows, DType dtype)>;
  // Restores what owned_state() lists from `read`; the default reads every
  // key of state() whole, in its dtype, and calls load_state.
  virtual void load_owned_state(const ReadRows& read);

 protected:
  std::vector<nn::Parameter*> params_;
  std::int64_t step_ = 0;
};

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<nn::Parameter*> params, AdamWOptions options);
  void step(double lr, double grad_scale = 1.0) override;
  std::map<std::string, Tensor> state() const override;
  void load_state(const std::map<std::string, Tensor>& state) override;

 private:
  AdamWOptions options_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
};

class SGD final : public Optimizer {
 public:
  SGD(std::vector<nn::Parameter*> params, SGDOptions options);
  void step(double lr, double grad_scale = 1.0) override;
  std::map<std::string, Tensor> state() const override;
  void load_state(const std::map<std::string, Tensor>& state) override;

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_;
};

// Several optimisers, each over its own parameters, driven as one: parameters replicated over different
// groups of ranks (under expert parallelism, the dense ones over the data-parallel group and the experts
// over the expert-data-parallel group) each get an optimiser partitioned over their own group. Every call
// goes to every member in one order (members' collectives are over their own groups, so every rank
// makes the same calls); state keys name their parameter, so members' states never collide.
class OptimizerGroups final : public Optimizer {
 public:
  explicit OptimizerGroups(std::vector<std::unique_ptr<Optimizer>> members);
  void step(double lr, double grad_scale = 1.0) override;
  void zero_grad() override;
  void reduce_gradients(bool last) override;
  double grad_sum_of_squares(const std::vector<nn::Parameter*>& subset) override;
  void set_step(std::int64_t step) override;
  std::map<std::string, Tensor> state() const override;
  void load_state(const std::map<std::string, Tensor>& state) override;
  bool partitioned() const noexcept override;
  std::map<std::string, Shard> owned_state() const override;
  void load_owned_state(const ReadRows& read) override;
  Optimizer& member(std::size_t i) { return *members_.at(i); }

 private:
  std::vector<std::unique_ptr<Optimizer>> members_;
};

// Sum of squares of the gradients (f64, deterministic) of `params`; each rank
// sums what it owns and the distributed runtime reduces over the right groups.
double grad_sum_of_squares(const std::vector<nn::Parameter*>& params);
// True when any gradient holds an Inf or NaN.
bool grads_have_inf_or_nan(const std::vector<nn::Parameter*>& params);
// The global-norm clipping coefficient min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0.
double clip_coefficient(double total_norm, double max_norm);

}  // namespace trident::optim
