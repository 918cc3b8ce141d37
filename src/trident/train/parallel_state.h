// Internal to the train module: this rank's place in the job and the
// data-parallel machinery of the run.
#pragma once

#include <memory>

#include "trident/dist/communicator.h"
#include "trident/dist/mesh.h"
#include "trident/nn/moe.h"
#include "trident/nn/tensor_parallel.h"
#include "trident/optim/optimizer.h"
#include "trident/parallel/data/grad_sync.h"
#include "trident/parallel/zero/zero_optimizer.h"

namespace trident::train::detail {

struct ParallelState {
  std::shared_ptr<dist::Communicator> world;  // the self communicator for a single process
  std::shared_ptr<dist::Communicator> dp;
  std::shared_ptr<dist::Communicator> tp;     // the tensor-parallel group (one rank without TP)
  std::shared_ptr<dist::Communicator> pp;     // the pipeline group: this rank's pipeline, ranks by stage
  // First and last stage of this rank's pipeline (Megatron's embedding group),
  // where tied input/output embeddings live; one rank on middle stages.
  std::shared_ptr<dist::Communicator> embedding;
  // Expert parallelism (dist::Mesh): the ranks that split each MoE layer's experts, and the ranks holding
  // the same experts, over which their gradients reduce (the data-parallel group when ep = 1).
  std::shared_ptr<dist::Communicator> ep;
  std::shared_ptr<dist::Communicator> expert_dp;
  std::unique_ptr<dist::Mesh> mesh;
  int rank = 0;
  int dp_rank = 0;
  int dp_size = 1;
  int tp_rank = 0;
  int tp_size = 1;
  int pp_rank = 0;
  int pp_size = 1;
  int ep_rank = 0;
  int ep_size = 1;
  int expert_dp_rank = 0;
  int chunks = 1;  // model chunks per rank (dist.virtual_pipeline_size)
  bool sequence_parallel = false;
  int zero_stage = 0;
  // Every stage: AdamW or SGD replicated (stage 0), else parallel::ZeroOptimizer (stages 1–3), which
  // reduces its gradients itself (Optimizer::reduce_gradients).
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<parallel::GradSync> grad_sync;    // stage 0 with dp > 1: the overlapped all-reduce
  nn::ParameterGatherer* gatherer = nullptr;        // stage 3: the optimizer, gathering parameter shards

  bool is_root() const noexcept { return rank == 0; }
  bool pipelined() const noexcept { return pp_size > 1; }
  // This rank feeds the pipeline its micro-batches (first stage) or computes the loss (last stage).
  bool first_stage() const noexcept { return pp_rank == 0; }
  bool last_stage() const noexcept { return pp_rank == pp_size - 1; }
  // The model's view of the tensor-parallel group.
  nn::TensorParallel tensor_parallel() const {
    return tp_size > 1 ? nn::TensorParallel{tp, sequence_parallel} : nn::TensorParallel{};
  }
  nn::ExpertParallel expert_parallel() const { return ep_size > 1 ? nn::ExpertParallel{ep} : nn::ExpertParallel{}; }
  // This rank's index among the replicas of `p` (0 writes it to checkpoints).
  int replica_rank(const nn::Parameter& p) const noexcept { return p.expert_parallel ? expert_dp_rank : dp_rank; }
  std::int64_t optimizer_steps() const { return optimizer->steps_taken(); }
};

}  // namespace trident::train::detail
