// Internal to the train module: this rank's place in the job and the
// data-parallel machinery of the run.
#pragma once

#include <memory>

#include "trident/models/family.h"
#include "trident/optim/optimizer.h"
#include "trident/parallel/data/grad_sync.h"
#include "trident/parallel/zero/zero_optimizer.h"
#include "trident/train/parallel_model.h"

namespace trident::train::detail {

// The groups (ParallelGroups, the library's) and what the trainer adds: model chunks, the ZeRO stage and
// the optimizer with its gradient reduction.
struct ParallelState : ParallelGroups {
  int chunks = 1;  // model chunks per rank (dist.virtual_pipeline_size)
  bool sequence_parallel = false;
  int zero_stage = 0;
  bool cp_all_to_all = false;  // dist.context_parallel_algorithm = "all_to_all" (else the ring)
  // Every stage: the registered optimizer (optim.name) replicated (stage 0), else parallel::ZeroOptimizer
  // (stages 1–3). Null for a ParallelModel, whose program holds its optimizer (a replicated one, so the
  // gradient reduction is GradSync's).
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<parallel::GradSync> grad_sync;    // stage 0 with dp > 1: the overlapped all-reduce
  parallel::ZeroOptimizer* zero = nullptr;          // stages 1–3: the optimizer, which reduces the gradients
  nn::ParameterGatherer* gatherer = nullptr;        // stage 3: the optimizer, gathering parameter shards

  // The model's view of the groups: the ones its layers join (models::ModelParallel).
  models::ModelParallel model_parallel() const {
    return {nn::TensorParallel{layer_group(dist::GroupKind::tp), sequence_parallel},
            layer_group(dist::GroupKind::ep), nn::ContextParallel{layer_group(dist::GroupKind::cp), cp_all_to_all}};
  }
  // This rank's index among the replicas of `p`, the ranks whose gradients of it are summed (0 writes it to
  // checkpoints): over dp × cp, or the experts' expert-dp × cp.
  int replica_rank(const nn::Parameter& p) const noexcept {
    return p.expert_parallel ? expert_dp_cp_rank : dp_cp_rank;
  }
  std::int64_t optimizer_steps() const { return optimizer->steps_taken(); }
};

}  // namespace trident::train::detail
