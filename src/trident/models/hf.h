// Hugging Face interchange: config.json and safetensors weights.
//
// trident's parameter names and shapes are those of GPT2LMHeadModel and
// LlamaForCausalLM, so saving and loading is a one-to-one copy: GPT-2's Conv1D
// weights are already [in, out], LLaMA's q/k/v/o projections are separate, the
// tied GPT-2 head is not stored (transformers re-ties it on load).
#pragma once

#include <string>

#include "trident/models/causal_lm.h"

namespace trident::models {

// Reads a transformers config.json (model_type gpt2 or llama). Errors name the file and key.
TransformerSpec read_hf_config(const std::string& path);
// The config.json text transformers expects for `spec`.
std::string hf_config_json(const TransformerSpec& spec, DType dtype = DType::f32);

// Writes DIR/config.json and DIR/model.safetensors (tensors in `dtype`; default f32).
// Single process: every parameter must be whole.
void save_hf(const CausalLM& model, const std::string& dir, DType dtype = DType::f32);

// Loads weights from DIR (model.safetensors, or model.safetensors.index.json with
// shards) into an initialised model, each parameter reading only its own shard.
// Missing tensors and shape mismatches are errors naming the tensor and both shapes.
void load_hf_weights(CausalLM& model, const std::string& dir);

}  // namespace trident::models
