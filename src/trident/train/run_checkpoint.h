// Internal to the train module: saving and restoring a run.
//
// Every rank writes the pieces it owns to shard-RRRRR.safetensors (rank 0 the
// replicated parameters and, without ZeRO, the optimiser state; under ZeRO
// each rank its rows of the moments, and under ZeRO-3 of the parameters), then
// rank 0 commits meta.json and the `latest` pointer after a barrier.
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
RunState load_optimizer_and_state(const checkpoint::CheckpointReader& reader, ParallelState& par);

}  // namespace trident::train::detail
