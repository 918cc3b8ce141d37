// Internal to the train module: turning a Config into the pieces of a run.
#pragma once

#include <memory>

#include "trident/data/dataset/sample_source.h"
#include "trident/data/tokenizer/tokenizer.h"
#include "trident/models/transformer_lm.h"
#include "trident/optim/schedule.h"
#include "trident/train/config/config.h"

namespace trident::optim {
class Method;
}

namespace trident::train::detail {

DType compute_dtype(const std::string& precision);
// Micro-batches per data-parallel rank per optimizer step.
std::int64_t accumulation_steps(const Config& c, int dp);
// The model's sizes: preset, explicit keys, tokenizer vocabulary, sequence length.
models::TransformerSpec model_spec(const ModelConfig& m, std::int64_t tokenizer_vocab, std::int64_t seq_len);
// A model.from_pretrained configuration `m` with the values of the spec it resolved to (`resolved`) in its keys
// and each key's source in `origin`: the run's config.toml records the model it trained, not unset keys.
ModelConfig recorded_pretrained(const ModelConfig& m, const models::TransformerSpec& resolved);
// `s` with the tokenizer's end-of-document id as eos_token_id and its post-processor's single leading
// token (a BOS), else for GPT-2 the end-of-document id, as bos_token_id; ids a pretrained config.json
// gave are kept.
models::TransformerSpec with_token_ids(models::TransformerSpec s, const data::Tokenizer& tokenizer);
// The learning-rate schedule of optim.lr and schedule.* (decay_steps 0 = train.steps).
optim::ScheduleOptions schedule_options(const Config& c);
// The optimizer optim.* describes; `betas`, when given, replace optim.betas (a schedule that cycles the
// momentum) for an optimizer that has betas.
optim::Method optimizer_method(const Config& config,
                               const std::optional<std::pair<double, double>>& betas = std::nullopt);

struct DataSources {
  data::Tokenizer tokenizer;
  std::shared_ptr<const data::SampleSource> train;
  std::shared_ptr<const data::SampleSource> valid;  // null when there is no validation data
};
// Opens the datasets, with `tokenizer` (data.tokenizer, loaded). A blend of
// several holds `train_samples` (the whole run) or `valid_samples` (one
// evaluation) samples; validation is left out when train.eval_interval is 0.
// Every dataset's token ids must lie in the tokenizer's vocabulary (checked
// with one scan of its .bin, whose result is cached next to the sample
// indices), else an error names the dataset, the tokenizer and both numbers.
// The samples are windows for `objective`: seq_len + 1 tokens, consecutive ones sharing one, for the
// next token; seq_len tokens that do not overlap for a masked LM (data::GptDatasetConfig::add_extra_token).
// With data.packing = false, one document per sample (data::DocumentDataset) of as many tokens, padded with
// the tokenizer's pad token (data::padding_id; none is an error naming data.packing and the tokenizer); a
// masked LM's cut keeps the template's closing tokens. A blend's sources are then weighed by documents.
DataSources open_data(const Config& c, data::Tokenizer tokenizer, std::int64_t train_samples,
                      std::int64_t valid_samples, models::Objective objective = models::Objective::next_token);
// The same, loading data.tokenizer.
DataSources open_data(const Config& c, std::int64_t train_samples, std::int64_t valid_samples);
// The samples in one epoch of the training split, summed over data.paths (the blended training set): its
// windows of train.seq_len tokens for `objective` (data.packing), or its documents (unpacked).
std::int64_t epoch_samples(const Config& c, models::Objective objective);
// The objective of the model the configuration describes (its family's: model.from_pretrained's
// config.json, model.preset's or model.arch).
models::Objective configured_objective(const Config& c);
// Every data.paths and data.valid_paths entry has its .bin and .idx, else an error naming it.
void check_data_paths(const Config& c);
// With train.epochs, sets train.steps to ⌊epochs × epoch_samples / global batch⌋ for a job of `world_size`
// ranks and returns the line that says so ("" without train.epochs). Fewer than one step is an error naming
// the keys.
std::string resolve_epochs(Config& c, int world_size);

}  // namespace trident::train::detail
