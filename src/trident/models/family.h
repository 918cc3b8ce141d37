// Model families: each family (GPT-2, LLaMA, Mistral, Qwen2, BERT, ...) is
// one Family, defined in its own file under models/families/ and registered in
// one place (models/families/registry.cpp). Everything that differs between
// families lives there:
//   - its config: the defaults of model.arch=<name>, its presets, the d_ff
//     default, what it validates, and Hugging Face's config.json both ways;
//   - its architecture names (model_type, architectures);
//   - its blocks, built from the generic nn layers (nn/transformer.h) with
//     the names of every sub-layer;
//   - the map from canonical parameter names to Hugging Face's;
//   - how it splits into pipeline stages;
//   - its head and loss, and the kind of samples it trains on.
// The trainer, checkpoints, export, import, generation and evaluation ask the
// registry; no code outside a family's own files branches on a family.
// docs/architecture.md has the recipe for adding one.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trident/models/spec.h"
#include "trident/models/stage.h"
#include "trident/nn/layers.h"
#include "trident/nn/moe.h"

namespace trident::models {

class HfConfigReader;  // models/hf_config.h: config.json being read (typed keys, errors naming file and key)
class HfConfigWriter;  // config.json being written

// What a family's model learns from, which decides the samples the data pipeline builds.
enum class Objective {
  next_token,  // causal LM: labels are the inputs shifted by one (data::GptDataset)
  masked_lm,   // encoder: a sample is read whole, some tokens are masked and predicted (data/dataset/masked_lm.h)
};

// Generation (trident generate, sampling.h) needs a causal model.
inline bool generates(Objective o) { return o == Objective::next_token; }

// The model's view of the parallel layout: the groups its layers join, each a dist::Group of one
// dimension (train::ParallelGroups::layer_group makes them): tensor parallelism (every family), expert
// parallelism (the MoE families' experts) and context parallelism (every family's attention). A dimension
// that layers use is a field here, read by the families it concerns.
struct ModelParallel {
  nn::TensorParallel tp;
  nn::ExpertParallel ep;
  nn::ContextParallel cp;
  ModelParallel(nn::TensorParallel t = {}, nn::ExpertParallel e = {}, nn::ContextParallel c = {})  // NOLINT: implicit from tp
      : tp(std::move(t)), ep(std::move(e)), cp(std::move(c)) {}
};

// A spec's block-sparse attention into a layer's options (SelfAttentionOptions::block_layout): the layout
// of spec.sparse_attention for max_seq_len, built once per spec and shared by every layer; nothing when
// the mode is unset.
void set_sparse_attention(const TransformerSpec& spec, nn::SelfAttentionOptions& options);
// That layout itself (spec.sparse_attention active), u8 [n_head or 1, nb, nb] on the host.
Tensor shared_block_layout(const TransformerSpec& spec);

// Where the model's non-block parts live, by canonical name. An empty name: the family has no such part.
struct PartNames {
  std::string token_embedding;     // "transformer.wte": its ".weight" is the table
  std::string position_embedding;  // learned absolute positions ("transformer.wpe"); empty = none
  std::string embed_dropout;       // the dropout site after the embeddings
  std::string layers;              // block i is named layers + "." + i
  std::string final_norm;          // after the last block (pre-norm families); empty = none (post-norm)
  std::string lm_head = "lm_head";  // the untied head's weight is lm_head + ".weight"
  // Encoder extras (BERT):
  std::string token_type_embedding;  // segment embeddings, TransformerSpec::type_vocab_size rows
  std::string embed_norm;            // a norm (make_norm) on the summed embeddings, before their dropout
  std::string head_transform;        // a layer (make_head_transform) between the last block and the LM head
  std::string head_bias;             // the LM head's own bias over the vocabulary
  std::string pooler;                // the first token's pooled output (make_pooler), with TransformerSpec::pooler
};

struct Family {
  std::string name;           // model.arch, TransformerSpec::family
  std::string display_name;   // "GPT-2"
  std::string hf_model_type;  // config.json model_type
  std::string hf_architecture;  // config.json architectures[0]
  bool moe = false;             // its blocks are mixtures of experts (TransformerSpec::n_experts and the moe_* options)
  Objective objective = Objective::next_token;
  PartNames names;
  // A document's first token defaults to the end-of-document token when the tokenizer has no
  // begin-of-sequence token (GPT-2's convention: <|endoftext|> begins and ends).
  bool eod_is_bos = false;

  // Config. `defaults` gives model.arch=<name> without a preset its options (sizes stay 0).
  std::function<TransformerSpec()> defaults;
  struct Preset {
    std::string name;
    std::function<TransformerSpec()> make;
  };
  std::vector<Preset> presets;
  std::function<std::int64_t(std::int64_t d_model)> default_d_ff;
  // Family-specific checks, after the generic ones (sizes positive, heads whole).
  std::function<void(const TransformerSpec&)> validate;
  // config.json: the keys beyond the common ones (model_type, architectures,
  // bos/eos ids, torch_dtype, which the caller handles).
  std::function<void(const HfConfigReader&, TransformerSpec&)> read_hf_config;
  std::function<void(const TransformerSpec&, HfConfigWriter&)> write_hf_config;

  // Structure: the norm (between blocks and final) and block `layer`, with their full names.
  std::function<std::unique_ptr<nn::Layer>(const std::string& name, const TransformerSpec&, const nn::TensorParallel&)>
      make_norm;
  std::function<std::unique_ptr<nn::Layer>(const std::string& name, const TransformerSpec&, std::int64_t layer,
                                           const ModelParallel&)>
      make_block;
  // With names.head_transform / names.pooler: those layers (replicated under tensor parallelism).
  std::function<std::unique_ptr<nn::Layer>(const std::string& name, const TransformerSpec&, const nn::TensorParallel&)>
      make_head_transform, make_pooler;

  // Parameters of one block, and of every part outside the blocks beyond the token and position
  // embeddings (the final norm; BERT's token types, embedding norm, head transform, head bias and
  // pooler), from the sizes alone (long double: the memory check meets sizes whose counts overflow
  // an int64). A test holds them to the built layout.
  std::function<long double(const TransformerSpec&)> block_parameters;
  std::function<long double(const TransformerSpec&)> other_parameters;
  // Activation memory: the values one block keeps per token for its backward (flash attention keeps no
  // scores), before tensor parallelism. `replicated` ones (the norms' inputs and outputs, a router) are
  // split only by sequence parallelism; `split` ones (attention's q/k/v and output, the MLP's hidden
  // units) by the tensor-parallel size; `experts` (the rows a mixture of experts dispatches) run whole on
  // every tensor-parallel rank and move between expert-parallel ranks with the routing. `backward`: what
  // the block's backward holds at once beyond them (the gradients of its widest values), split like
  // `split`. The planner's memory model (train/plan/memory_estimate.h) sums them;
  // tests/train/plan_memory_test.cpp holds the sum to measured peaks. Default: GPT-2's block.
  struct SavedValues {
    long double replicated = 0, split = 0, experts = 0, backward = 0;
  };
  std::function<SavedValues(const TransformerSpec&)> block_activations = [](const TransformerSpec& s) {
    const long double D = static_cast<long double>(s.d_model), F = static_cast<long double>(s.d_ff);
    return SavedValues{4 * D, 4 * D + 2 * F, 0, 2 * F};  // GELU's input and output
  };

  // Hugging Face names: the names under which a transformers file may hold the canonical
  // parameter `name`, the one read first when several are present. Default: the canonical name itself.
  std::function<std::vector<std::string>(const std::string& name)> hf_names;
  // The names an export writes the canonical parameter `name` under. Default: hf_names' first.
  // (BERT's decoder bias: transformers reads cls.predictions.bias when the head is tied and
  // cls.predictions.decoder.bias when it is not, so both are written.)
  std::function<std::vector<std::string>(const std::string& name)> hf_export_names;
  // Whether a Hugging Face directory may lack the canonical parameter `name` (BERT's MLM head in a
  // BertModel directory): it then keeps its initial values. Default: none may be missing.
  std::function<bool(const std::string& name)> optional_in_hf;
  // Whether a transformers file's tensor `hf_name` is a buffer that no parameter reads, which transformers
  // loads without a word (GPT-2's causal masks attn.bias and attn.masked_bias, BERT's embeddings.position_ids,
  // a rotary embedding's inv_freq). Any other tensor the model does not use is named in a warning
  // (unused_hf_tensors). Default: those four.
  std::function<bool(const std::string& hf_name)> hf_buffer;

  // Pipeline stages: default partition_layers (embeddings on the first stage, head on the last).
  std::function<std::vector<StageRange>(std::int64_t n_layer, int stages, const std::vector<std::int64_t>& counts)>
      partition = partition_layers;
};

// model.arch's default.
inline constexpr const char* kDefaultFamily = "gpt2";

// The family registered as `name`; an error lists the registered ones.
const Family& family(const std::string& name);
// The family whose config.json model_type is `model_type`, or null.
const Family* family_for_model_type(const std::string& model_type);
// Every registered family, in registration order.
const std::vector<const Family*>& families();
// "gpt2, llama, ..." for messages.
std::string family_names();

// Parameters of the whole model from its sizes: embeddings (and the untied head), learned positions,
// the blocks and the final norm.
long double parameter_count(const TransformerSpec& spec);

// Named sizes of every family: "gpt2" (124M), "gpt2-medium", "llama-tiny", "mistral-tiny", ...
TransformerSpec preset(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace trident::models
