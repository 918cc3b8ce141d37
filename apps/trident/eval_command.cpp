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
#include <filesystem>
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
  std::string precision = "fp32";
};

// The stream of tokens to evaluate, read in order and at most `limit` long: a dataset's documents,
// read as they are needed (a dataset may not fit in memory), or a text file's ids.
class TokenStream {
 public:
  TokenStream(const EvalOptions& o, const data::Tokenizer& tokenizer)
      : limit_(o.max_tokens > 0 ? o.max_tokens : std::numeric_limits<std::int64_t>::max()) {
    if (!o.data.empty()) {
      TRIDENT_CHECK(std::filesystem::exists(o.data + ".idx") && std::filesystem::exists(o.data + ".bin"),
                    "--data '{}': no dataset there (expected {}.bin and {}.idx)", o.data, o.data, o.data);
      dataset_ = data::IndexedDataset::open(o.data);
      return;
    }
    text_ids_ = tokenizer.encode(read_file_option("--text", o.text));
  }

  // Appends up to `n` more tokens to `out`; fewer only at the end of the stream.
  void read(std::int64_t n, std::vector<std::int64_t>& out) {
    n = std::min(n, limit_ - taken_);
    while (n > 0) {
      std::int64_t got = 0;
      if (dataset_) {
        if (sequence_ >= dataset_->size()) break;
        const std::int64_t length = dataset_->sequence_lengths()[sequence_];
        got = std::min(n, length - offset_);
        chunk_.resize(static_cast<std::size_t>(got));
        dataset_->read(sequence_, offset_, got, chunk_.data());
        out.insert(out.end(), chunk_.begin(), chunk_.end());
        offset_ += got;
        if (offset_ == length) {
          ++sequence_;
          offset_ = 0;
        }
      } else {
        got = std::min(n, static_cast<std::int64_t>(text_ids_.size()) - taken_);
        if (got <= 0) break;
        out.insert(out.end(), text_ids_.begin() + taken_, text_ids_.begin() + taken_ + got);
      }
      taken_ += got;
      n -= got;
    }
  }

 private:
  std::int64_t limit_;
  std::int64_t taken_ = 0;
  std::shared_ptr<const data::IndexedDataset> dataset_;
  std::size_t sequence_ = 0;
  std::int64_t offset_ = 0;
  std::vector<std::int32_t> chunk_;
  std::vector<std::int32_t> text_ids_;
};

void evaluate(const EvalOptions& o) {
  const InferenceModel loaded = load_inference_model(o.checkpoint);
  const std::int64_t T = o.seq_len > 0 ? o.seq_len : loaded.spec.max_seq_len;
  TRIDENT_CHECK(T <= loaded.spec.max_seq_len, "--seq-len {} exceeds the model's context of {} tokens", T,
                loaded.spec.max_seq_len);
  TokenStream stream(o, loaded.tokenizer);

  autograd::NoGradGuard no_grad;
  nn::ForwardContext ctx;
  ctx.compute_dtype = precision_dtype(o.precision);
  double nll = 0;  // summed over every prediction
  std::int64_t predicted = 0, windows = 0;
  // `tokens` holds the last token already predicted (the next window's first input), then the tokens
  // read since; each pass takes as many whole windows as it can, and at the end of the stream the
  // shorter last one.
  std::vector<std::int64_t> tokens;
  stream.read(1, tokens);
  while (true) {
    stream.read(o.batch_size * T + 1 - static_cast<std::int64_t>(tokens.size()), tokens);
    const auto have = static_cast<std::int64_t>(tokens.size()) - 1;  // predictions available
    const std::int64_t count = have >= T ? have / T : (have > 0 ? 1 : 0);
    if (count == 0) break;
    const std::int64_t length = std::min(have, T);
    std::vector<std::int64_t> ids, labels;
    for (std::int64_t w = 0; w < count; ++w) {
      const auto begin = tokens.begin() + w * length;
      ids.insert(ids.end(), begin, begin + length);
      labels.insert(labels.end(), begin + 1, begin + length + 1);
    }
    const Tensor x = Tensor::from_vector(ids, {count, length});
    const Tensor y = Tensor::from_vector(labels, {count, length});
    nll += loaded.model->loss(x, y, ctx, /*normalizer=*/1.0).data().item();
    predicted += count * length;
    windows += count;
    tokens.erase(tokens.begin(), tokens.begin() + count * length);
  }
  const std::string source = o.data.empty() ? o.text : o.data;
  TRIDENT_CHECK(predicted > 0, "'{}' holds fewer than 2 tokens; evaluating needs at least 2", source);
  if (loaded.tp.rank() != 0) return;
  const double loss = nll / static_cast<double>(predicted);
  fmt::print("eval: {} tokens of {} predicted in {} window(s) of up to {}: loss {:.4f} | perplexity {:.2f}\n",
             predicted, source, windows, T, loss, std::exp(loss));
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
  add_precision_option(*cmd, o->precision);
  cmd->callback([o] {
    if (o->data.empty() && o->text.empty()) throw CLI::RequiredError("--data or --text");
    evaluate(*o);
  });
}

}  // namespace trident::cli
