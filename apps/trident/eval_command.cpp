// trident eval --checkpoint DIR (--data PREFIX | --text FILE) [--seq-len T] [--batch-size B] [--max-tokens N]
//
// The loss and perplexity of a checkpoint on a token stream: a Megatron
// dataset's documents in order (PREFIX.bin/.idx, as `trident preprocess`
// writes them), or a text file encoded whole with the checkpoint's tokenizer
// (its post-processor's tokens, such as a BOS, included). The stream of N
// tokens is cut into windows of T input tokens with stride T (the last one
// shorter), each predicting its next T tokens, so every token but the first is
// predicted exactly once, from the context of its own window: the loss is the
// mean negative log-likelihood over those N − 1 predictions and the perplexity
// its exponential (Hugging Face's perplexity recipe with stride = window).
//
// Under `trident launch -n T` the model is tensor-parallel, as for generate.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>

#include "commands.h"
#include "trident/autograd/autograd.h"
#include "trident/data/indexed_dataset.h"

namespace trident::cli {

namespace {

struct EvalOptions {
  std::string checkpoint;
  std::string data;
  std::string text;
  std::int64_t seq_len = 0;  // 0 = the model's context
  std::int64_t batch_size = 4;
  std::int64_t max_tokens = 0;  // 0 = all
};

// The token stream to evaluate, at most `max_tokens` long (0 = all).
std::vector<std::int64_t> read_tokens(const EvalOptions& o, const data::Tokenizer& tokenizer) {
  std::vector<std::int64_t> tokens;
  const auto limit =
      static_cast<std::size_t>(o.max_tokens > 0 ? o.max_tokens : std::numeric_limits<std::int64_t>::max());
  if (!o.data.empty()) {
    const auto dataset = data::IndexedDataset::open(o.data);
    for (std::size_t i = 0; i < dataset->size() && tokens.size() < limit; ++i) {
      const std::vector<std::int32_t> sequence = dataset->sequence(i);
      tokens.insert(tokens.end(), sequence.begin(), sequence.end());
    }
  } else {
    std::ifstream in(o.text, std::ios::binary);
    TRIDENT_CHECK(in.good(), "--text '{}': cannot read the file", o.text);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::vector<std::int32_t> ids = tokenizer.encode(text);
    tokens.assign(ids.begin(), ids.end());
  }
  if (tokens.size() > limit) tokens.resize(limit);
  TRIDENT_CHECK(tokens.size() >= 2, "'{}' holds {} token(s); evaluating needs at least 2",
                o.data.empty() ? o.text : o.data, tokens.size());
  return tokens;
}

void evaluate(const EvalOptions& o) {
  const InferenceModel loaded = load_inference_model(o.checkpoint);
  const std::int64_t T = o.seq_len > 0 ? o.seq_len : loaded.spec.max_seq_len;
  TRIDENT_CHECK(T <= loaded.spec.max_seq_len, "--seq-len {} exceeds the model's context of {} tokens", T,
                loaded.spec.max_seq_len);
  const std::vector<std::int64_t> tokens = read_tokens(o, loaded.tokenizer);
  const auto N = static_cast<std::int64_t>(tokens.size());
  const std::int64_t predicted = N - 1;
  const std::int64_t windows = (predicted + T - 1) / T;

  autograd::NoGradGuard no_grad;
  double nll = 0;  // summed over every prediction
  // Windows first..first+count, all of `length` inputs, as one batch.
  const auto run = [&](std::int64_t first, std::int64_t count, std::int64_t length) {
    std::vector<std::int64_t> ids, labels;
    for (std::int64_t w = first; w < first + count; ++w) {
      const auto begin = tokens.begin() + w * T;
      ids.insert(ids.end(), begin, begin + length);
      labels.insert(labels.end(), begin + 1, begin + length + 1);
    }
    const Tensor x = Tensor::from_vector(ids, {count, length});
    const Tensor y = Tensor::from_vector(labels, {count, length});
    nll += loaded.model->loss(x, y, nn::ForwardContext{}, /*normalizer=*/1.0).data().item();
  };
  const std::int64_t full = predicted / T;
  for (std::int64_t w = 0; w < full; w += o.batch_size) run(w, std::min(o.batch_size, full - w), T);
  if (predicted % T != 0) run(full, 1, predicted % T);

  if (loaded.tp.rank() != 0) return;
  const double loss = nll / static_cast<double>(predicted);
  fmt::print("eval: {} tokens of {} predicted in {} window(s) of up to {}: loss {:.4f} | perplexity {:.2f}\n",
             predicted, o.data.empty() ? o.text : o.data, windows, T, loss, std::exp(loss));
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Loss and perplexity of a checkpoint on a dataset or a text file");
  auto o = std::make_shared<EvalOptions>();
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint directory, or a run directory")->required();
  auto* data = cmd->add_option("--data", o->data, "Dataset prefix (PREFIX.bin/.idx): its documents in order");
  auto* text = cmd->add_option("--text", o->text, "Text file, encoded whole with the checkpoint's tokenizer");
  data->excludes(text);
  cmd->add_option("--seq-len", o->seq_len, "Window length in tokens (0 = the model's context)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "Windows per forward pass")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "Evaluate only the first N tokens (0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->callback([o] {
    if (o->data.empty() && o->text.empty()) throw CLI::RequiredError("--data or --text");
    evaluate(*o);
  });
}

}  // namespace trident::cli
