// trident eval --checkpoint DIR (--data PREFIX | --text FILE) [--seq-len T] [--batch-size B] [--max-tokens N]
//
// The loss and perplexity of a checkpoint on a token stream: a Megatron
// dataset's documents in order (PREFIX.bin/.idx, as `trident preprocess`
// writes them), or a text file encoded whole with the checkpoint's tokenizer
// (its post-processor's tokens, such as a BOS, included); a JSONL or Parquet file's documents are their
// --json-key strings, each followed by the end-of-document token. The stream of N
// tokens is cut into windows of T input tokens with stride T (the last one
// shorter), each predicting its next T tokens, so every token but the first is
// predicted exactly once, from the context of its own window: the loss is the
// mean negative log-likelihood over those N − 1 predictions and the perplexity
// its exponential (Hugging Face's perplexity recipe with stride = window).
//
// An encoder (BERT) is scored as a masked LM: the stream is cut into windows
// of T tokens with stride T, the last one shorter (a text file's lines are its documents, each
// framed by the tokenizer's template, [CLS] line [SEP], as `trident preprocess
// --encoder` frames them), window w is masked as the training data is
// (data/dataset/masked_lm.h: --mlm-probability, 80/10/10, special tokens never, at
// global sample w with --seed), and the report is the mean cross-entropy over
// the masked tokens (the MLM loss), the share of them predicted exactly (the
// MLM accuracy) and exp(loss) (Hugging Face run_mlm's perplexity).
//
// Under `trident launch -n T` the model is tensor-parallel, as for generate.
// The scoring is train::evaluate's (train/inference.h); this file is its options and its line.
#include <fmt/format.h>

#include "commands.h"
#include "trident/train/inference.h"

namespace trident::cli {

namespace {

struct EvalOptions {
  std::string checkpoint;
  std::string precision = "fp32";
  train::EvalOptions eval;
};

void evaluate(const EvalOptions& o) {
  const train::InferenceModel loaded = train::load_inference_model(o.checkpoint);
  train::EvalOptions eval = o.eval;
  eval.compute_dtype = precision_dtype(o.precision);
  const train::EvalResult r = train::evaluate(loaded, eval);
  if (loaded.tp.rank() != 0) return;
  if (r.masked_lm) {
    fmt::print("eval: {} masked tokens of {} ({} tokens in {} window(s) of up to {}): MLM loss {:.4f} | MLM accuracy "
               "{:.2f}% | perplexity {:.2f}\n",
               r.predicted, r.source, r.tokens, r.windows, r.seq_len, r.loss, 100.0 * r.accuracy.value_or(0),
               r.perplexity);
    return;
  }
  fmt::print("eval: {} tokens of {} predicted in {} window(s) of up to {}: loss {:.4f} | perplexity {:.2f}\n",
             r.predicted, r.source, r.windows, r.seq_len, r.loss, r.perplexity);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "eval", "Loss and perplexity of a checkpoint on a dataset or a text file (an encoder: MLM loss and accuracy)");
  auto o = std::make_shared<EvalOptions>();
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint directory, or a run directory")->required();
  auto* data = cmd->add_option("--data", o->eval.data, "Dataset prefix (PREFIX.bin/.idx): its documents in order");
  auto* text = cmd->add_option("--text", o->eval.text,
                               "Text file, encoded whole with the checkpoint's tokenizer; a .jsonl/.json (or "
                               ".parquet) file: the --json-key field of each document");
  cmd->add_option("--json-key", o->eval.json_key, "--text of a JSONL or Parquet file: the key (column) of the text")
      ->capture_default_str();
  data->excludes(text);
  cmd->add_option("--seq-len", o->eval.seq_len, "Window length in tokens (0 = the model's context)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--batch-size", o->eval.batch_size, "Windows per forward pass")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-tokens", o->eval.max_tokens, "Evaluate only the first N tokens (0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--mlm-probability", o->eval.mlm_probability, "Masked LM (BERT): the share of tokens masked")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_flag("--whole-word-masking", o->eval.whole_word, "Masked LM: mask whole words (WordPiece's ## continuations)");
  cmd->add_option("--seed", o->eval.seed, "Masked LM: the seed of the masks (window w is masked as sample w)")
      ->capture_default_str();
  add_precision_option(*cmd, o->precision);
  cmd->callback([o] {
    if (o->eval.data.empty() && o->eval.text.empty()) throw CLI::RequiredError("--data or --text");
    evaluate(*o);
  });
}

}  // namespace trident::cli
