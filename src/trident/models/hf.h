// Hugging Face interchange: config.json and safetensors weights (and pytorch_model.bin, read only).
//
// trident's parameter names and shapes are those of GPT2LMHeadModel and
// LlamaForCausalLM, so saving and loading is a one-to-one copy: GPT-2's Conv1D
// weights are already [in, out], LLaMA's q/k/v/o projections are separate, the
// tied GPT-2 head is not stored (transformers re-ties it on load).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trident/models/transformer_lm.h"

namespace trident::models {

// Reads a transformers config.json (model_type gpt2 or llama). Errors name the file and key.
TransformerSpec read_hf_config(const std::string& path);
// The config.json text transformers expects for `spec`.
std::string hf_config_json(const TransformerSpec& spec, DType dtype = DType::f32);

// transformers' default shard limit ("5GB").
inline constexpr std::uint64_t kDefaultMaxShardBytes = 5'000'000'000ULL;

// The whole tensor `name` (canonical name, global shape) in `dtype`.
using TensorSource = std::function<Tensor(const std::string& name, DType dtype)>;

// Writes a Hugging Face model directory for `spec`: DIR/config.json and the
// weights, asking `source` for one tensor at a time as the file reaches it
// (so no more than one tensor is ever in memory). Up to `max_shard_bytes` of
// tensor data: DIR/model.safetensors; above, transformers' sharded layout —
// DIR/model-00001-of-0000N.safetensors … and model.safetensors.index.json
// (metadata.total_size, weight_map). `extra_files` (a tokenizer.json, say) are
// copied in beside them. Returns the names of the files written.
//
// Everything is written to "DIR.tmp" and moved into DIR only once complete:
// a failure leaves DIR as it was. Weight files of an earlier export into DIR
// that this one does not replace are removed.
std::vector<std::string> write_hf(const TransformerSpec& spec, const std::string& dir, DType dtype,
                                  const TensorSource& source, std::uint64_t max_shard_bytes = kDefaultMaxShardBytes,
                                  const std::vector<std::string>& extra_files = {});

// write_hf from a single-process model (every parameter must be whole).
void save_hf(const TransformerLM& model, const std::string& dir, DType dtype = DType::f32,
             std::uint64_t max_shard_bytes = kDefaultMaxShardBytes);

// Loads weights from DIR (model.safetensors, its index, pytorch_model.bin, its index: the first there,
// as transformers looks) into an initialised model, each parameter reading only its own shard.
// Missing tensors and shape mismatches are errors naming the tensor and both shapes.
void load_hf_weights(TransformerLM& model, const std::string& dir);

// The tensors of DIR's weights that no parameter of the whole model `spec` reads, nor the tied head, in name
// order: transformers warns about them ("Some weights of the model checkpoint were not used"), and so does
// a run (model.from_pretrained_strict refuses them). Family::hf_buffer's buffers are not counted.
std::vector<std::string> unused_hf_tensors(const TransformerSpec& spec, const std::string& dir);

}  // namespace trident::models
