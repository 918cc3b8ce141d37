// Internal to the train module: saving and restoring a run.
//
// Every rank writes the pieces it owns to shard-RRRRR.safetensors, in global
// coordinates (each tensor's canonical name, global shape and offsets):
//   parameters, and without ZeRO the optimiser state: the ranks of data-parallel
//     rank 0 — each its tensor-parallel shards (through the parameter's
//     ShardSpec, so GPT-2's fused c_attn shard becomes three pieces and the
//     vocabulary padding is left out), and tensor-parallel rank 0 the
//     replicated parameters;
//   under ZeRO each rank its rows of the moments (and under ZeRO-3 of the
//     parameters), mapped through the same ShardSpec;
// then rank 0 commits meta.json and the `latest` pointer after a barrier.
// Reading assembles each rank's local tensors from whatever pieces exist, so
// the layout that reads need not be the one that wrote.
#pragma once

#include <string>

#include "trident/checkpoint/sharded.h"
#include "trident/models/causal_lm.h"
#include "trident/train/config.h"
#include "trident/train/parallel_state.h"

namespace trident::train::detail {

struct RunState {
  std::int64_t step = 0;              // optimizer steps completed
  std::int64_t consumed_samples = 0;  // global samples consumed
  double loss_scale = 0;
};

std::string save_checkpoint(const std::string& root, const models::CausalLM& model, const ParallelState& par,
                            const RunState& state, const Config& config, const std::string& tokenizer_path);

// Model weights (before ZeRO shards them), then the optimiser state and the run state.
void load_model(const checkpoint::CheckpointReader& reader, models::CausalLM& model);
RunState load_optimizer_and_state(const checkpoint::CheckpointReader& reader, const models::CausalLM& model,
                                  ParallelState& par);

}  // namespace trident::train::detail
