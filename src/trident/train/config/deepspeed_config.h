// DeepSpeed's JSON config (ds_config.json) mapped onto trident's keys.
//
// `trident train --deepspeed ds_config.json` (or train.deepspeed_config) reads
// the file — JSON with // and /* */ comments — and sets the trident keys its
// entries mean: the batch triple checked as DeepSpeed checks it against the
// data-parallel size, zero_optimization.stage, the Adam/AdamW optimizer, the
// warmup schedulers, fp16/bf16 with the loss scaler's options, gradient
// clipping and steps_per_print. docs/deepspeed.md lists every key: mapped,
// ignored (tunes DeepSpeed's internals: a note), or refused (would change the
// run and trident does not build it: an error naming the key).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "trident/train/config/config.h"

namespace trident::train {

// Applies the DeepSpeed config `json_text` (`origin` names it in every line and error) on top of
// `config`, for a job of `data_parallel_size` data-parallel ranks. `given` holds the trident keys the
// TOML file or a --set gave ("optim.clip_grad"): a DeepSpeed default for a key the file leaves out (no
// scheduler: a constant rate; no gradient_clipping: DeepSpeed's clipping) does not replace them. Returns
// one line per key, in the file's order: what it set ("ds.json: train_micro_batch_size_per_gpu 4 →
// train.micro_batch_size = 4") or why it set nothing. Every key that cannot apply is named in one error.
std::vector<std::string> apply_deepspeed_json(Config& config, const std::string& json_text, const std::string& origin,
                                              std::int64_t data_parallel_size, const std::set<std::string>& given = {});
// Reads the file `path` and applies it as apply_deepspeed_json does.
std::vector<std::string> apply_deepspeed_file(Config& config, const std::string& path,
                                              std::int64_t data_parallel_size, const std::set<std::string>& given = {});
// The one line a DeepSpeed run prints at start: the learning-rate schedule and the clipping the final
// configuration `config` (the file applied, then --set) resolves to. Refuses a CPU offload the file asked
// for on a run that is not on the CPU.
std::string deepspeed_resolved_line(const Config& config);

}  // namespace trident::train
