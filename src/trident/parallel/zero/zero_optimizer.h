// ZeRO stages 1–3 (Rajbhandari et al. 2020) with any registered optimizer
// (optim/registry.h): the state tensors its entry declares are partitioned
// like the parameter, and its rule updates the rows each rank owns.
//
// Each parameter is partitioned across the data-parallel group along its first
// dimension: with R rows and d ranks, rank r owns rows [r·c, (r+1)·c) ∩ [0, R)
// for c = ceil(R / d). A shard is therefore a box of the parameter — which is
// what lets checkpoints describe it in global coordinates and lets any later
// layout read it back.
//
//   stage 1: optimizer state (and the update) live only on the owning rank; full
//            gradients accumulate locally and are reduce-scattered after the
//            last micro-batch; updated rows are all-gathered into the
//            replicated parameters.
//   stage 2: as 1, but gradients are reduce-scattered after every micro-batch
//            and kept only as shards (the full gradient is transient).
//   stage 3: as 2, and parameters too are kept only as shards; the model
//            gathers each unit's parameters just before it runs (forward and
//            recomputation in backward) and releases them after
//            (nn::ParameterGatherer).
//
// Collectives are blocking here, after backward (stage 0 — plain data
// parallelism — overlaps its bucketed all-reduce with backward instead, see
// parallel/data/grad_sync.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "trident/dist/communicator.h"
#include "trident/nn/gather.h"
#include "trident/optim/optimizer.h"

namespace trident::parallel {

// A group of parameters replicated over the data-parallel communicator `dp`, partitioned over it.
struct ZeroGroup {
  std::vector<nn::Parameter*> params;
  std::shared_ptr<dist::Communicator> dp;
};

// An optim::Optimizer the trainer drives like a replicated one (zero_grad, step), plus what partitioning
// adds: reduce_gradients after each micro-batch, grad_sum_of_squares over the group, and
// owned_state/load_owned_state for checkpoints. Under stage 3 it is also the model's
// nn::ParameterGatherer.
//
// Several groups (under expert parallelism: the dense parameters over the data-parallel group, the
// experts over the expert-data-parallel group) are partitioned each over its own communicator; every
// call goes through them in their order.
//
// Which ranks: every rank of each group's communicator constructs it with the same stage and the
// same parameters in the same order, and calls reduce_gradients, grad_sum_of_squares, step and gather
// together (each is collective over the groups; release is local). It borrows the parameters; they must
// outlive it.
class ZeroOptimizer final : public optim::Optimizer, public nn::ParameterGatherer {
 public:
  ZeroOptimizer(int stage, std::vector<ZeroGroup> groups, optim::Method method);
  ZeroOptimizer(int stage, std::vector<nn::Parameter*> params, std::shared_ptr<dist::Communicator> dp,
                optim::Method method);

  int stage() const noexcept { return stage_; }
  // Rows [begin, end) of parameter `p` owned by this rank.
  std::pair<std::int64_t, std::int64_t> owned_rows(const nn::Parameter& p) const;

  void zero_grad() override;
  // After each micro-batch's backward (`last`: the step's final micro-batch).
  void reduce_gradients(bool last);
  // Sum of squares of the reduced gradients of `subset` over the whole group
  // (every rank gets the total).
  double grad_sum_of_squares(const std::vector<nn::Parameter*>& subset);
  // The rule on the owned rows (grads multiplied by grad_scale), then (stages 1, 2)
  // all-gather of the updated parameters.
  void step(double lr, double grad_scale) override;

  // ZeRO-3 gathering (nn::ParameterGatherer); no-ops for stages 1 and 2.
  void gather(const std::vector<nn::Parameter*>& params) override;
  void release(const std::vector<nn::Parameter*>& params) override;

  // For checkpoints in global coordinates: a piece of state and the first row
  // of its parameter that it holds.
  struct Shard {
    Tensor data;
    std::int64_t row_offset = 0;
  };
  // The shards this rank owns, for checkpoints (every rank writes its own): key "exp_avg/<name>" etc.
  // (the names of the optimizer's state) → (tensor, row offset). Stage 3 also lists "model/<name>"
  // (its parameter shard).
  std::map<std::string, Shard> owned_state() const;
  // Reads rows [row_begin, row_begin + rows) of the state `key` (in global
  // coordinates of the parameter's first dimension) in `dtype`.
  using ReadRows =
      std::function<Tensor(const std::string& key, std::int64_t row_begin, std::int64_t rows, DType dtype)>;
  // Restores the state (and stage-3 parameter shards) from the rows `read` gives (read in f32).
  void load_owned_state(const ReadRows& read);
  // owned_state() without the offsets, and its inverse: tensors of the owned rows by key.
  std::map<std::string, Tensor> state() const override;
  void load_state(const std::map<std::string, Tensor>& state) override;
  void set_method(optim::Method method) override;

  // Stage 3: the parameter's owned rows (the persistent copy).
  const Tensor& parameter_shard(const nn::Parameter& p) const;

 private:
  struct Entry {
    nn::Parameter* param;
    dist::Communicator* dp = nullptr;                     // its group's
    std::size_t group = 0;
    std::int64_t rows = 0, row_size = 0, chunk_rows = 0;  // c = chunk_rows
    std::int64_t begin = 0, end = 0;                      // owned rows
    Tensor grad_shard;          // stages 2, 3: [chunk_rows · row_size] padded, accumulated reduced gradient
    std::vector<Tensor> state;  // the optimizer's state tensors, flat [owned rows · row_size]
    Tensor param_shard;         // stage 3: [owned rows, ...]
    Shape full_shape;
    int gathered = 0;  // stage 3: nesting count of gather()
  };
  // The reduced gradient of the owned rows (flat), or undefined.
  Tensor owned_grad(const Entry& e) const;
  Entry& entry(const nn::Parameter& p);
  const Entry& entry(const nn::Parameter& p) const;
  void reduce_scatter_into_shard(Entry& e, const Tensor& full_grad);
  Tensor all_gather_rows(const Entry& e, const Tensor& owned) const;
  // The rule's StepArgs::sum_over_pieces over `updated` (the entries of the updates, in order).
  void sum_over_groups(const std::vector<Entry*>& updated, std::span<double> values) const;

  int stage_;
  std::vector<std::shared_ptr<dist::Communicator>> groups_;
  optim::Method method_;
  bool fresh_ = true;  // no step taken nor state loaded yet
  std::vector<Entry> entries_;
  std::map<const nn::Parameter*, std::size_t> index_;
};

}  // namespace trident::parallel
