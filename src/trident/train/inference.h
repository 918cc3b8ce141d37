// Inference on a trained model: opening a checkpoint for it, generating text, and scoring a token stream.
// The `trident generate` and `trident eval` commands and the Python package (Model.generate,
// trident.evaluate) are these functions with their own input and output.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "trident/checkpoint/sharded.h"
#include "trident/core/dtype.h"
#include "trident/data/tokenizer/tokenizer.h"
#include "trident/models/sampling.h"
#include "trident/models/transformer_lm.h"
#include "trident/nn/module.h"

namespace trident::train {

// PATH, opened (every file verified, once): a step directory, or a run directory (or checkpoint root): its
// newest checkpoint that verifies, `latest` first, warning on stderr about each one skipped. Errors name
// `flag` (the option or argument that gave PATH) and the path.
std::unique_ptr<checkpoint::CheckpointReader> open_checkpoint(const std::string& path,
                                                              const std::string& flag = "--checkpoint");

// A checkpoint's model (weights loaded, f32) and tokenizer: on one process, or when launched by mpirun,
// srun or trident launch, tensor-parallel over the job's ranks (rank 0 chooses the checkpoint with
// open_checkpoint, and every rank loads its shard of that one).
struct InferenceModel {
  nn::TensorParallel tp;  // inactive on one process
  std::string dir;        // the checkpoint directory chosen
  models::TransformerSpec spec;
  data::Tokenizer tokenizer;
  std::unique_ptr<models::TransformerLM> model;
};
// `generates`: the caller generates text, which an encoder cannot (an error before any weight is read).
InferenceModel load_inference_model(const std::string& checkpoint, bool generates = false,
                                    const std::string& flag = "--checkpoint");

struct GenerateOptions {
  std::int64_t max_new_tokens = 64;
  models::SamplingOptions sampling;  // temperature 0 = greedy
  // Generation ends before any of these ids (none: it runs to max_new_tokens or the context's end).
  std::vector<std::int64_t> stop_ids;
  // Ids at or past this are never drawn (a vocabulary table padded beyond the tokenizer's); 0 = none.
  std::int64_t vocab_limit = 0;
  DType compute_dtype = DType::f32;
};

struct GenerateResult {
  std::vector<std::int64_t> ids;  // the new ids, the stop id not included
  bool out_of_context = false;    // stopped because the model's context was full
};

// Continues `prompt` (at least one id, fewer than the model's context) with a KV cache, drawing each id
// with models::sample_next (the same on every tensor-parallel rank); `on_token` sees each new id as it
// comes. Under tensor parallelism every rank of the group calls it alike. Errors name the prompt's length.
GenerateResult generate(const models::TransformerLM& model, std::span<const std::int64_t> prompt,
                        const GenerateOptions& options, const std::function<void(std::int64_t)>& on_token = {});

// The ids generation stops at for a model and its tokenizer: config.json's eos ids (Llama 3 instruct lists
// several), else the tokenizer's end-of-document token.
std::vector<std::int64_t> default_stop_ids(const models::TransformerSpec& spec, const data::Tokenizer& tokenizer);

struct EvalOptions {
  std::string data;                // a dataset prefix (PREFIX.bin/.idx): its documents in order
  std::string text;                // or a text, JSONL or Parquet file (json_key: each document's field)
  std::string json_key = "text";
  std::int64_t seq_len = 0;        // window length; 0 = the model's context
  std::int64_t batch_size = 4;     // windows per forward pass
  std::int64_t max_tokens = 0;     // evaluate only the first N tokens (0 = all)
  DType compute_dtype = DType::f32;
  double mlm_probability = 0.15;   // masked LM only
  bool whole_word = false;
  std::uint64_t seed = 1234;
};

struct EvalResult {
  bool masked_lm = false;
  std::string source = {};      // the data or text path
  std::int64_t predicted = 0;   // the tokens scored: predictions (causal), masked tokens (masked LM)
  std::int64_t tokens = 0;      // the tokens read
  std::int64_t windows = 0;
  std::int64_t seq_len = 0;     // the window length used
  double loss = 0;              // mean negative log-likelihood over the scored tokens
  double perplexity = 0;        // exp(loss)
  std::optional<double> accuracy = std::nullopt;  // masked LM: the share of masked tokens predicted exactly
};

// The loss and perplexity of `model` on a token stream, as `trident eval` documents them (causal LMs:
// windows of seq_len with stride seq_len, every token but the first predicted once; encoders: the masked-LM
// loss and accuracy). The same on every tensor-parallel rank. Errors name the option and value.
EvalResult evaluate(const InferenceModel& model, const EvalOptions& options);

}  // namespace trident::train
