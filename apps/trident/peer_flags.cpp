// Flags a user of Megatron-LM (or mpirun) types out of habit, and the trident key that does the same:
// an unknown `--train-iters 100` gets "trident's key is train.steps (--set train.steps=100)" instead of
// CLI11's bare "not expected" (docs/guide/configuration.md, "Coming from Megatron-LM").
#include <fmt/format.h>

#include <array>
#include <string_view>

#include "commands.h"

namespace trident::cli {

namespace {

struct PeerFlag {
  std::string_view flag;   // Megatron-LM's spelling
  std::string_view key;    // the trident key
  std::string_view value;  // the value a flag without one means ("" = the next word)
};

// Megatron-LM's arguments (megatron/training/arguments.py) most runs set, by the key of the same meaning.
constexpr std::array kMegatronFlags{
    PeerFlag{"--train-iters", "train.steps", ""},
    PeerFlag{"--micro-batch-size", "train.micro_batch_size", ""},
    PeerFlag{"--global-batch-size", "train.global_batch_size", ""},
    PeerFlag{"--seq-length", "train.seq_len", ""},
    PeerFlag{"--seed", "train.seed", ""},
    PeerFlag{"--log-interval", "train.log_interval", ""},
    PeerFlag{"--eval-interval", "train.eval_interval", ""},
    PeerFlag{"--eval-iters", "train.eval_steps", ""},
    PeerFlag{"--exit-duration-in-mins", "train.exit_duration_minutes", ""},
    PeerFlag{"--bf16", "train.precision", "bf16"},
    PeerFlag{"--fp16", "train.precision", "fp16"},
    PeerFlag{"--recompute-activations", "train.activation_checkpointing", "true"},
    PeerFlag{"--num-layers", "model.n_layer", ""},
    PeerFlag{"--hidden-size", "model.d_model", ""},
    PeerFlag{"--ffn-hidden-size", "model.d_ff", ""},
    PeerFlag{"--num-attention-heads", "model.n_head", ""},
    PeerFlag{"--num-query-groups", "model.n_kv_head", ""},
    PeerFlag{"--max-position-embeddings", "model.max_seq_len", ""},
    PeerFlag{"--make-vocab-size-divisible-by", "model.make_vocab_size_divisible_by", ""},
    PeerFlag{"--hidden-dropout", "model.dropout", ""},
    PeerFlag{"--init-method-std", "model.init_std", ""},
    PeerFlag{"--norm-epsilon", "model.norm_eps", ""},
    PeerFlag{"--rotary-base", "model.rope_theta", ""},
    PeerFlag{"--untie-embeddings-and-output-weights", "model.tie_embeddings", "false"},
    PeerFlag{"--num-experts", "model.n_experts", ""},
    PeerFlag{"--moe-router-topk", "model.experts_per_token", ""},
    PeerFlag{"--lr", "optim.lr", ""},
    PeerFlag{"--weight-decay", "optim.weight_decay", ""},
    PeerFlag{"--clip-grad", "optim.clip_grad", ""},
    PeerFlag{"--adam-eps", "optim.eps", ""},
    PeerFlag{"--min-lr", "schedule.min_lr", ""},
    PeerFlag{"--lr-decay-style", "schedule.decay", ""},
    PeerFlag{"--lr-warmup-iters", "schedule.warmup_steps", ""},
    PeerFlag{"--lr-decay-iters", "schedule.decay_steps", ""},
    PeerFlag{"--data-path", "data.paths", ""},
    PeerFlag{"--split", "data.split", ""},
    PeerFlag{"--eod-mask-loss", "data.eod_mask_loss", "true"},
    PeerFlag{"--reset-attention-mask", "data.reset_attention_mask", "true"},
    PeerFlag{"--reset-position-ids", "data.reset_position_ids", "true"},
    PeerFlag{"--tokenizer-model", "data.tokenizer", ""},
    PeerFlag{"--vocab-file", "data.tokenizer", ""},
    PeerFlag{"--tensor-model-parallel-size", "dist.tensor_parallel_size", ""},
    PeerFlag{"--pipeline-model-parallel-size", "dist.pipeline_parallel_size", ""},
    PeerFlag{"--expert-model-parallel-size", "dist.expert_parallel_size", ""},
    PeerFlag{"--context-parallel-size", "dist.context_parallel_size", ""},
    PeerFlag{"--sequence-parallel", "dist.sequence_parallel", "true"},
    PeerFlag{"--use-distributed-optimizer", "dist.zero_stage", "1"},
    PeerFlag{"--save-interval", "checkpoint.interval", ""},
    PeerFlag{"--save", "checkpoint.dir", ""},
    PeerFlag{"--load", "checkpoint.resume", ""},
};

}  // namespace

std::string peer_flag_hint(int argc, char** argv, std::string_view refused) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word == "--") break;  // the rest is launch's command, which reports its own flags
    const auto eq = word.find('=');
    const std::string_view flag = word.substr(0, eq);
    for (const PeerFlag& p : kMegatronFlags) {
      if (flag != p.flag || refused.find(p.flag) == std::string_view::npos) continue;
      std::string value(p.value);
      if (value.empty()) {
        if (eq != std::string_view::npos) value = std::string(word.substr(eq + 1));
        else if (i + 1 < argc && !std::string_view(argv[i + 1]).starts_with("--")) value = argv[i + 1];
        else value = "VALUE";
      }
      // A list key takes a TOML list: --data-path a b is ["a", "b"] (one word here).
      if (p.key == "data.paths") value = fmt::format("'[\"{}\"]'", value);
      return fmt::format("{} is Megatron-LM's flag; trident's key is {}: --set {}={}", p.flag, p.key, p.key, value);
    }
  }
  return "";
}

}  // namespace trident::cli
