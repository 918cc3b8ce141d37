// The typed training configuration: TOML file + `--set section.key=value`.
//
// Section and key names follow Megatron's and LiBai's vocabulary. Every key in
// a file or override must be one of the fields below with a value of the
// right type; anything else is an error that names the key (and suggests the
// nearest known key), the file, and what was expected. Cross-field rules
// (batch sizes, parallel sizes against the world size) are checked by
// validate() before any work starts.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trident/models/spec.h"

namespace trident::train {

// The model.* keys. An option's value is held in its models::TransformerSpec field: the table of model options
// (train/config/model_options.cpp) names each key's field, what the key left unset means (mostly 0 = the preset's or
// the family's), its values, and whether model.from_pretrained may set it and a resume must match it.
// `family` is not a key (model.arch is).
struct ModelConfig : models::TransformerSpec {
  std::string arch = "gpt2";   // models::kDefaultFamily; a registered family (models/families/registry.cpp)
  std::string preset;          // gpt2, gpt2-medium, llama-tiny, ... (fills the sizes)
  std::string from_pretrained; // Hugging Face directory to load weights from
  bool from_pretrained_strict = false;  // refuse its tensors that the model does not use (else a warning names them)
  std::set<std::string> given;  // the model keys a file or a --set gave ("dropout")
  // A model.from_pretrained run's resolved keys: where each value came from, for config.toml ("config.json").
  std::map<std::string, std::string> origin;
};

struct DataConfig {
  std::string tokenizer;             // tokenizer.json
  std::vector<std::string> paths;    // dataset prefixes (PREFIX.bin / PREFIX.idx)
  std::vector<double> weights;       // blending weights (default: each dataset's tokens in the split)
  std::string split = "969,30,1";    // train, valid, test (of data.paths)
  std::vector<std::string> valid_paths;  // separate validation datasets, blended by tokens (then split's valid share is unused)
  std::string cache_dir;             // sample-index cache (default: beside the data)
  std::int64_t prefetch = 4;         // batches prepared ahead by the loader thread
  bool eod_mask_loss = false;        // no loss where the input token is the tokenizer's end-of-document
  // true: samples are windows of train.seq_len tokens that run across documents (Megatron's packing);
  // false: one document per sample, truncated or padded to train.seq_len, with an attention mask, the
  // loss over its real tokens only (Hugging Face's padding="max_length", truncation=True).
  bool packing = true;
  // Packed samples (Megatron's --reset-attention-mask, --reset-position-ids; decoders): a token attends
  // only to the tokens of its own document, and positions restart at 0 after each end-of-document token
  // (which ends the document it closes).
  bool reset_attention_mask = false;
  bool reset_position_ids = false;
  // Masked LM (encoder families, BERT): transformers' mlm_probability, and whole-word masking.
  double mlm_probability = 0.15;
  bool whole_word_masking = false;
};

struct TrainConfig {
  std::int64_t seq_len = 128;
  std::int64_t micro_batch_size = 4;
  std::int64_t global_batch_size = 0;  // 0 = micro_batch_size × data_parallel_size
  std::int64_t steps = 100;
  // Passes over the (blended) training set, instead of train.steps (never both): the run's steps are
  // floor(epochs × samples of one epoch / global batch), resolved at start (train/setup.h).
  std::optional<double> epochs;
  std::int64_t seed = 1234;
  std::string precision = "fp32";      // fp32 | bf16 | fp16
  std::int64_t log_interval = 10;
  std::int64_t eval_interval = 100;
  std::int64_t eval_steps = 10;  // global batches per evaluation
  bool activation_checkpointing = false;
  double peak_gflops = 0.0;            // for MFU; 0 = measure the matmul peak at start
  std::string device = "cpu";          // cpu | cuda
  std::int64_t threads = 0;            // CPU threads per rank; 0 = cores / ranks on the node
  double exit_duration_minutes = 0;    // save and stop once this long after the start (0 = never)
  // Early stopping (Lightning's EarlyStopping): stop, with a checkpoint, after this many evaluations in a
  // row in which checkpoint.monitor did not improve by more than early_stopping_min_delta (0 = off).
  std::int64_t early_stopping_patience = 0;
  double early_stopping_min_delta = 0;
  std::string deepspeed_config;        // a DeepSpeed JSON config mapped onto these keys (docs/deepspeed.md)
};

struct OptimConfig {
  std::string name = "adamw";          // a registered optimizer (optim/registry.h): adamw | sgd
  double lr = 3e-4;
  std::vector<double> betas = {0.9, 0.95};
  double eps = 1e-8;
  double weight_decay = 0.1;
  double momentum = 0.9;               // sgd
  double clip_grad = 1.0;              // global gradient-norm clip; 0 = off
  double initial_loss_scale = 65536.0; // fp16
  std::int64_t loss_scale_window = 2000;   // fp16: good steps before the scale doubles
  double min_loss_scale = 1.0;             // fp16: the scale never halves below this
  std::int64_t loss_scale_hysteresis = 1;  // fp16: overflows before the scale halves (DeepSpeed's hysteresis)
  bool bias_correction = true;             // adamw: false drops Adam's bias correction (DeepSpeed's FusedAdam option)
  // fp32/bf16: skip an optimizer step whose gradients are not finite (counted, the weights kept), as
  // DeepSpeed's bf16 check_grad_overflow; false stops the run on a non-finite loss. fp16's scaler always skips.
  bool skip_nonfinite_steps = false;
};

struct ScheduleConfig {
  std::int64_t warmup_steps = 0;
  // cosine | linear | constant | one_cycle | wsd | inverse_sqrt, or DeepSpeed's schedulers (docs/deepspeed.md):
  // deepspeed_warmup | deepspeed_warmup_decay | deepspeed_warmup_cosine | deepspeed_one_cycle
  std::string decay = "cosine";
  std::int64_t decay_steps = 0;        // 0 = train.steps
  std::int64_t wsd_decay_steps = 0;    // wsd: the last steps of decay_steps, which decay
  std::string wsd_decay_style = "exponential";  // wsd: linear | cosine | exponential | minus_sqrt
  double min_lr = 0.0;
  // The deepspeed_* decays only (optim/schedule.h): the warmup's shape and start, and OneCycle's options
  // under DeepSpeed's names (min_lr is cycle_min_lr, optim.lr cycle_max_lr).
  std::string warmup_type = "linear";           // linear | log
  double warmup_min_lr = 0.0;
  std::int64_t cycle_first_step_size = 2000;
  std::int64_t cycle_second_step_size = 0;      // 0 = cycle_first_step_size
  std::int64_t cycle_first_stair_count = 0;     // 0 = no stairs
  std::int64_t cycle_second_stair_count = -1;   // -1 = cycle_first_stair_count
  std::int64_t decay_step_size = 0;             // 0 = no decay after the cycle
  double decay_lr_rate = 0.0;
  bool cycle_momentum = false;                  // cycle beta1 (DeepSpeed's OneCycle cycle_momentum)
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
  // deepspeed_lr_range_test (optim.lr is lr_range_test_min_lr, where it starts).
  std::int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

struct DistConfig {
  std::int64_t data_parallel_size = 0;      // 0 = inferred: world / (tp × pp × cp)
  std::int64_t tensor_parallel_size = 1;
  std::int64_t pipeline_parallel_size = 1;
  std::vector<std::int64_t> pipeline_num_layers;  // explicit per-stage layer counts
  std::int64_t virtual_pipeline_size = 1;
  std::string pipeline_schedule = "1f1b";   // gpipe | 1f1b | interleaved
  bool sequence_parallel = false;
  std::int64_t zero_stage = 0;              // 0 | 1 | 2 | 3
  // Each MoE layer's experts split over this many data-parallel ranks (dist::Mesh); 1 = every rank holds all.
  std::int64_t expert_parallel_size = 1;
  // Context parallelism: each sequence split over this many ranks, each holding 2 of its 2·cp chunks
  // (docs/parallelism.md#context-parallelism); the attention runs as a ring of K/V blocks ("ring") or as
  // DeepSpeed-Ulysses' head scatter ("all_to_all", needing the heads per tensor-parallel rank divisible by cp).
  std::int64_t context_parallel_size = 1;
  std::string context_parallel_algorithm = "ring";
  double timeout_s = 300.0;                 // collective timeout
  // How the data-parallel ranks combine their gradients: "mean" (the global batch's mean gradient) or "sum"
  // (DeepSpeed's gradient_allreduce_op "sum": data_parallel_size times the mean).
  std::string gradient_reduce = "mean";
};

struct CheckpointConfig {
  std::string dir;                     // default: RUN_DIR/checkpoints
  std::int64_t interval = 0;           // steps between saves; 0 = only at the end
  std::int64_t keep = 3;               // most recent checkpoints kept
  // Also keep the keep_best checkpoints of the lowest `monitor` (Lightning's save_top_k; 0 = off); every
  // evaluated step is then saved, and RUN_DIR/checkpoints/best names the best one.
  std::int64_t keep_best = 0;
  std::string monitor = "val_loss";    // val_loss | val_ppl: what keep_best and early stopping compare
  std::string resume;                  // "" | "auto" | a checkpoint directory
};

struct LogConfig {
  std::string progress = "auto";       // auto | on | off (live progress line on a terminal)
  std::string metrics_file = "metrics.jsonl";
  // The progress line names the slowest rank when its own work in a logged step (the step less its time
  // blocked on communication) exceeds the ranks' median by this factor; metrics.jsonl has it always.
  double straggler_threshold = 1.5;
  // TensorBoard event files of the metrics.jsonl scalars: "" off; else their directory, relative to the run
  // directory unless absolute. The key takes true (= "tensorboard"), false (= off) or a path.
  std::string tensorboard;
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimConfig optim;
  ScheduleConfig schedule;
  DistConfig dist;
  CheckpointConfig checkpoint;
  LogConfig log;
  // Not a key: the DeepSpeed config whose mapping this configuration holds (its values are already in the
  // fields above, so train.deepspeed_config is cleared once applied); to_toml records it as a comment.
  std::string applied_deepspeed_config;
  // Not a key: the DeepSpeed keys that ask for a CPU offload, which only a CPU run builds (there it changes
  // nothing); checked against the final train.device.
  std::vector<std::string> deepspeed_cpu_offload;
};

// Field metadata, for documentation and `trident train --help-config`.
struct ConfigKey {
  std::string key;   // "train.micro_batch_size"
  std::string type;  // "integer", "float", "boolean", "string", "list of floats", ...
};
std::vector<ConfigKey> config_keys();

// Applies a TOML document (its text; `origin` names it in errors) on top of `config`.
void apply_toml(Config& config, const std::string& toml_text, const std::string& origin);
// Reads a TOML file on top of `config`.
void apply_file(Config& config, const std::string& path);
// Applies one "section.key=value" override; the value is TOML (a bare word is taken as a string).
void apply_override(Config& config, const std::string& assignment);

// Loads `path` (may be empty for defaults only), then the overrides in order. A `--set model.preset=P`
// is later and more explicit than the file: it replaces the model the file describes (the file's
// architecture keys are dropped; `--set` size keys still apply on top). When model.preset and explicit
// size keys both set a size, the explicit key wins. Each of these, when it happens, is one line appended
// to `notes` (docs/guide/configuration.md, "Presets and explicit keys").
Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   std::vector<std::string>* notes = nullptr);
// The same, and when train.deepspeed_config names a DeepSpeed JSON config (in the file or an override),
// maps it in between: the TOML file, then the DeepSpeed config, then the overrides (docs/deepspeed.md).
// `world_size` is the job's rank count (the batch checks need the data-parallel size); the mapping's
// lines, one per DeepSpeed key, are appended to `notes`.
Config load_config(const std::string& path, const std::vector<std::string>& overrides, int world_size,
                   std::vector<std::string>* notes);

// Sets one key from a TOML value's text ("0.0001", "\"bf16\"", "[0.9, 0.95]"), with the checks a
// file's value gets; errors name `origin`.
void set_key(Config& config, const std::string& key, const std::string& toml_value, const std::string& origin);
// A key's value as TOML text.
std::string key_value(const Config& config, const std::string& key);
// The numbers of optim.<name> (one for a scalar key): the values an optimizer's registry entry reads
// (optim/registry.h, OptimizerDef::keys).
std::vector<double> optim_setting(const Config& config, const std::string& name);

// The configuration as TOML, every key present: printed at start and saved in the run directory.
std::string to_toml(const Config& config);

// The nearest known key to `key` by edit distance ("" if nothing is close).
std::string nearest_key(const std::string& key);

}  // namespace trident::train
