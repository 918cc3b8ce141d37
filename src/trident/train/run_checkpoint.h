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
// then rank 0 commits meta.json and the `latest` pointer after a barrier (with checkpoint.keep_best, then
// the `best` pointer, written the same way), and prunes what neither checkpoint.keep nor keep_best keeps.
// Under pipeline parallelism each stage writes its own layers; the last
// stage's copy of tied embeddings (Parameter::tied_copy) is never written —
// it equals the first stage's, which is read back into both.
// Reading assembles each rank's local tensors from whatever pieces exist, so
// the layout that reads need not be the one that wrote.
#pragma once

#include <string>

#include "trident/checkpoint/sharded.h"
#include "trident/models/transformer_lm.h"
#include "trident/train/best_checkpoints.h"
#include "trident/train/config/config.h"
#include "trident/train/parallel_state.h"

namespace trident::train::detail {

struct RunState {
  std::int64_t step = 0;              // optimizer steps completed
  std::int64_t consumed_samples = 0;  // global samples consumed
  double loss_scale = 0;
  std::int64_t loss_scale_good_steps = 0;  // fp16: good steps since the scale last changed
  std::int64_t loss_scale_hysteresis_left = 0;  // fp16: overflows left before the scale halves
  double lr = 0;                      // the learning rate of the last step (recorded, recomputed on resume)
  MonitorState monitor;               // the best checkpoints and early stopping (best_checkpoints.h)
};

// `params`: every parameter this rank holds (all its model chunks).
std::string save_checkpoint(const std::string& root, const std::vector<nn::Parameter*>& params,
                            const models::TransformerSpec& spec, const ParallelState& par, const RunState& state,
                            const Config& config, const std::string& tokenizer_path);

// Throws unless the checkpoint's model (config.json: family, sizes,
// vocabulary) is `spec`'s: a resume continues the same model, under any
// layout. The error names the key and both values.
void check_same_model(const checkpoint::CheckpointReader& reader, const models::TransformerSpec& spec);
// A run that starts afresh would replace (and rotate away) the checkpoints under `root`, and mix its
// curve into the earlier run's: throws when there is one, naming the key and both values when it holds
// another model, else the newest one and how to continue it.
void check_fresh_run(const std::string& root, const models::TransformerSpec& spec);

// Model weights (before ZeRO shards them), then the optimiser state and the run state.
void load_model(const checkpoint::CheckpointReader& reader, const std::vector<nn::Parameter*>& params);
RunState load_optimizer_and_state(const checkpoint::CheckpointReader& reader,
                                  const std::vector<nn::Parameter*>& params, ParallelState& par);

}  // namespace trident::train::detail
