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
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "commands.h"
#include "trident/autograd/autograd.h"
#include "trident/data/dataset/document_reader.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/loader.h"
#include "trident/data/dataset/masked_lm.h"

namespace trident::cli {

namespace {

struct EvalOptions {
  std::string checkpoint;
  std::string data;
  std::string text;
  std::string json_key = "text";  // --text of a JSONL or Parquet file: the field holding each document
  std::int64_t seq_len = 0;  // 0 = the model's context
  std::int64_t batch_size = 4;
  std::int64_t max_tokens = 0;  // 0 = all
  std::string precision = "fp32";
  double mlm_probability = 0.15;  // masked LM only
  bool whole_word = false;
  std::uint64_t seed = 1234;
};

// The stream of tokens to evaluate, read in order and at most `limit` long: a dataset's documents,
// read as they are needed (a dataset may not fit in memory), or a text file's ids.
class TokenStream {
 public:
  TokenStream(const EvalOptions& o, const data::Tokenizer& tokenizer, bool encoder)
      : limit_(o.max_tokens > 0 ? o.max_tokens : std::numeric_limits<std::int64_t>::max()) {
    if (!o.data.empty()) {
      TRIDENT_CHECK(std::filesystem::exists(o.data + ".idx") && std::filesystem::exists(o.data + ".bin"),
                    "--data '{}': no dataset there (expected {}.bin and {}.idx)", o.data, o.data, o.data);
      dataset_ = data::IndexedDataset::open(o.data);
      return;
    }
    const std::string text = read_file_option("--text", o.text);
    if (data::detect_input_format(o.text) != data::InputFormat::text) {
      read_documents(o, tokenizer, encoder);
      return;
    }
    if (!encoder) {
      text_ids_ = tokenizer.encode(text);
      return;
    }
    // An encoder's documents are the lines, each framed by the template.
    std::size_t begin = 0;
    while (begin < text.size()) {
      std::size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      std::string_view line(text.data() + begin, end - begin);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.find_first_not_of(" \t") != std::string_view::npos) {
        const std::vector<std::int32_t> ids = tokenizer.encode(line);
        text_ids_.insert(text_ids_.end(), ids.begin(), ids.end());
      }
      begin = end + 1;
    }
  }

  // A JSONL (or Parquet) file's documents, the string at --json-key of each, never the raw records: a
  // decoder's each followed by the end-of-document token when the tokenizer has one (`trident preprocess
  // --append-eod`'s stream), an encoder's each framed by the template.
  void read_documents(const EvalOptions& o, const data::Tokenizer& tokenizer, bool encoder) {
    data::DocumentReader reader({o.text}, std::nullopt, o.json_key);
    data::RawDocument doc;
    while (reader.next(doc)) {
      const std::string body = data::extract_document_text(doc, reader.format_of(doc.file_index), o.json_key, o.text);
      if (body.find_first_not_of(" \t\r\n") == std::string::npos) continue;
      const std::vector<std::int32_t> ids = tokenizer.encode(body);
      text_ids_.insert(text_ids_.end(), ids.begin(), ids.end());
      if (!encoder && tokenizer.eod_id()) text_ids_.push_back(*tokenizer.eod_id());
    }
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

// The masked-LM report of an encoder (see the top of the file).
void evaluate_masked_lm(const EvalOptions& o, const InferenceModel& loaded, TokenStream& stream, std::int64_t T) {
  data::MaskingOptions masking;
  try {
    masking = data::masking_for_tokenizer(loaded.tokenizer, o.mlm_probability, o.whole_word, o.seed);
  } catch (const Error& e) {
    TRIDENT_FAIL("checkpoint {}: its tokenizer.json: {}", loaded.dir, e.message());
  }
  autograd::NoGradGuard no_grad;
  nn::ForwardContext ctx;
  ctx.compute_dtype = precision_dtype(o.precision);
  const std::int64_t V = loaded.spec.vocab_size;
  double nll = 0;
  std::int64_t masked = 0, correct = 0, windows = 0, tokens = 0;
  // Masks `count` windows of `length` tokens at `ids` (the next global samples), runs them and scores the masked.
  auto score = [&](const std::int64_t* ids, std::int64_t count, std::int64_t length) {
    std::vector<std::int64_t> inputs(static_cast<std::size_t>(count * length)), labels(inputs.size());
    for (std::int64_t w = 0; w < count; ++w) {
      const std::vector<std::int32_t> window(ids + w * length, ids + (w + 1) * length);
      const auto at = static_cast<std::size_t>(w * length);
      masked += data::mask_sample(masking, windows + w, window,
                                  std::span(inputs).subspan(at, static_cast<std::size_t>(length)),
                                  std::span(labels).subspan(at, static_cast<std::size_t>(length)));
    }
    const Tensor logits =
        loaded.model->forward(Tensor::from_vector(inputs, {count, length}), ctx).data().to(DType::f32);
    const auto z = logits.span<float>();
    for (std::size_t row = 0; row < labels.size(); ++row) {
      if (labels[row] == data::kIgnoreLabel) continue;
      const float* r = z.data() + row * static_cast<std::size_t>(V);
      const auto best = std::max_element(r, r + V) - r;
      double sum = 0;
      for (std::int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(r[v]) - r[best]);
      nll += static_cast<double>(r[best]) + std::log(sum) - r[labels[row]];
      correct += best == labels[row];
    }
    windows += count;
    tokens += count * length;
  };
  while (true) {
    std::vector<std::int64_t> read;
    stream.read(o.batch_size * T, read);
    const auto n = static_cast<std::int64_t>(read.size());
    if (n / T > 0) score(read.data(), n / T, T);
    if (n % T > 0) score(read.data() + n / T * T, 1, n % T);  // the stream's last, shorter window
    if (n < o.batch_size * T) break;
  }
  const std::string source = o.data.empty() ? o.text : o.data;
  TRIDENT_CHECK(masked > 0, "'{}': no token was masked in {} tokens (too short, or only special tokens)", source,
                tokens);
  if (loaded.tp.rank() != 0) return;
  const double loss = nll / static_cast<double>(masked);
  fmt::print("eval: {} masked tokens of {} ({} tokens in {} window(s) of up to {}): MLM loss {:.4f} | MLM accuracy "
             "{:.2f}% | perplexity {:.2f}\n",
             masked, source, tokens, windows, T, loss, 100.0 * static_cast<double>(correct) / static_cast<double>(masked),
             std::exp(loss));
}

void evaluate(const EvalOptions& o) {
  const InferenceModel loaded = load_inference_model(o.checkpoint);
  const std::int64_t T = o.seq_len > 0 ? o.seq_len : loaded.spec.max_seq_len;
  TRIDENT_CHECK(T <= loaded.spec.max_seq_len, "--seq-len {} exceeds the model's context of {} tokens", T,
                loaded.spec.max_seq_len);
  const bool encoder = models::family(loaded.spec.family).objective == models::Objective::masked_lm;
  TokenStream stream(o, loaded.tokenizer, encoder);
  if (encoder) return evaluate_masked_lm(o, loaded, stream, T);

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
  auto* cmd = app.add_subcommand(
      "eval", "Loss and perplexity of a checkpoint on a dataset or a text file (an encoder: MLM loss and accuracy)");
  auto o = std::make_shared<EvalOptions>();
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint directory, or a run directory")->required();
  auto* data = cmd->add_option("--data", o->data, "Dataset prefix (PREFIX.bin/.idx): its documents in order");
  auto* text = cmd->add_option("--text", o->text,
                               "Text file, encoded whole with the checkpoint's tokenizer; a .jsonl/.json (or "
                               ".parquet) file: the --json-key field of each document");
  cmd->add_option("--json-key", o->json_key, "--text of a JSONL or Parquet file: the key (column) of the text")
      ->capture_default_str();
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
  cmd->add_option("--mlm-probability", o->mlm_probability, "Masked LM (BERT): the share of tokens masked")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_flag("--whole-word-masking", o->whole_word, "Masked LM: mask whole words (WordPiece's ## continuations)");
  cmd->add_option("--seed", o->seed, "Masked LM: the seed of the masks (window w is masked as sample w)")
      ->capture_default_str();
  add_precision_option(*cmd, o->precision);
  cmd->callback([o] {
    if (o->data.empty() && o->text.empty()) throw CLI::RequiredError("--data or --text");
    evaluate(*o);
  });
}

}  // namespace trident::cli
