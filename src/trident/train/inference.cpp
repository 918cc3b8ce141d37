#include "trident/train/inference.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "trident/autograd/autograd.h"
#include "trident/core/error.h"
#include "trident/data/dataset/document_reader.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/loader.h"
#include "trident/data/dataset/masked_lm.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/models/family.h"
#include "trident/models/hf.h"
#include "trident/train/trainer.h"

namespace trident::train {

namespace fs = std::filesystem;

std::unique_ptr<checkpoint::CheckpointReader> open_checkpoint(const std::string& path, const std::string& flag) {
  if (fs::exists(fs::path(path) / "meta.json")) return std::make_unique<checkpoint::CheckpointReader>(path);
  // A run directory or a checkpoint root: the newest checkpoint that verifies, as a resumed run
  // would choose it (`latest` first; a damaged one is skipped with a warning, not used).
  for (const fs::path& root : {fs::path(path), fs::path(path) / "checkpoints"}) {
    std::vector<std::string> skipped;
    auto reader = checkpoint::open_latest_valid_checkpoint(root.string(), &skipped);
    for (const std::string& why : skipped) fmt::print(stderr, "warning: skipping a checkpoint that does not verify: {}\n", why);
    if (reader) {
      if (!skipped.empty()) fmt::print(stderr, "warning: using the older checkpoint {}\n", reader->dir());
      return reader;
    }
    TRIDENT_CHECK(skipped.empty(), "{} '{}': no checkpoint under '{}' verifies (see the warnings above)", flag, path,
                  root.string());
  }
  TRIDENT_FAIL("{} '{}' is neither a checkpoint (no meta.json) nor a run directory with checkpoints", flag, path);
}

InferenceModel load_inference_model(const std::string& checkpoint, bool generates, const std::string& flag) {
  InferenceModel m;
  if (dist::launched_by_mpi()) m.tp.group = dist::mpi_world(300.0);
  // Rank 0 chooses the checkpoint and every rank loads that one: a rank that
  // judged on its own after a transient read error could load an older step.
  std::unique_ptr<checkpoint::CheckpointReader> reader =
      m.tp.rank() == 0 ? open_checkpoint(checkpoint, flag) : nullptr;
  if (m.tp.active()) {
    const std::string chosen = m.tp.group->broadcast_text(reader ? reader->dir() : std::string());
    if (!reader) reader = std::make_unique<checkpoint::CheckpointReader>(chosen);
  }
  m.dir = reader->dir();
  m.spec = models::read_hf_config((fs::path(m.dir) / "config.json").string());
  const models::Family& family = models::family(m.spec.family);
  TRIDENT_CHECK(!generates || models::generates(family.objective),
                "checkpoint {} holds a {} model, an encoder trained to fill in masked tokens: it cannot generate "
                "text (score it with `trident eval`, or `trident export` it for transformers' fill-mask pipeline)",
                m.dir, family.display_name);
  m.tokenizer = data::Tokenizer::load(fs::path(m.dir) / "tokenizer.json");
  m.model = std::make_unique<models::TransformerLM>(m.spec, m.tp.active() ? m.tp : nn::TensorParallel{});
  m.model->initialize(0);
  load_checkpoint_weights(*reader, *m.model);
  return m;
}

std::vector<std::int64_t> default_stop_ids(const models::TransformerSpec& spec, const data::Tokenizer& tokenizer) {
  std::vector<std::int64_t> stop = spec.eos_token_ids;
  if (stop.empty() && tokenizer.eod_id()) stop.push_back(*tokenizer.eod_id());
  return stop;
}

GenerateResult generate(const models::TransformerLM& model, std::span<const std::int64_t> prompt,
                        const GenerateOptions& options, const std::function<void(std::int64_t)>& on_token) {
  const models::TransformerSpec& spec = model.spec();
  const models::SamplingOptions& so = options.sampling;
  TRIDENT_CHECK(std::isfinite(so.temperature) && so.temperature >= 0, "temperature {}: expected a finite number >= 0",
                so.temperature);
  TRIDENT_CHECK(so.top_p > 0 && so.top_p <= 1, "top_p {}: expected a number in (0, 1]", so.top_p);
  TRIDENT_CHECK(so.top_k >= 0 && so.no_repeat_ngram >= 0 && options.max_new_tokens >= 0,
                "top_k {}, no_repeat_ngram {} and max_new_tokens {}: expected numbers >= 0", so.top_k,
                so.no_repeat_ngram, options.max_new_tokens);
  TRIDENT_CHECK(!prompt.empty(), "the prompt has no tokens; give some text");
  TRIDENT_CHECK(static_cast<std::int64_t>(prompt.size()) < spec.max_seq_len,
                "the prompt has {} tokens; the model's context is {}", prompt.size(), spec.max_seq_len);
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    TRIDENT_CHECK(prompt[i] >= 0 && prompt[i] < spec.vocab_size,
                  "prompt id {} at position {} is outside the model's vocabulary [0, {})", prompt[i], i,
                  spec.vocab_size);
  }
  std::vector<std::int64_t> history(prompt.begin(), prompt.end());
  autograd::NoGradGuard no_grad;
  nn::KVCache cache(static_cast<std::size_t>(spec.n_layer));
  nn::ForwardContext ctx;
  ctx.cache = &cache;
  ctx.compute_dtype = options.compute_dtype;
  GenerateResult result;
  Tensor input = Tensor::from_vector(history, {1, static_cast<std::int64_t>(history.size())});
  std::int64_t position = 0;
  const std::int64_t V = spec.vocab_size;
  const auto limit = static_cast<std::size_t>(options.vocab_limit > 0 ? std::min(options.vocab_limit, V) : V);
  for (std::int64_t i = 0; i < options.max_new_tokens; ++i) {
    if (position + input.size(1) > spec.max_seq_len) {
      result.out_of_context = true;
      break;
    }
    ctx.position_offset = position;
    Tensor logits = model.forward(input, ctx).data();
    position += input.size(1);
    const Tensor last = logits.view({-1, V}).select0(logits.numel() / V - 1).to(DType::f32);
    std::vector<float> row = last.to_vector<float>();
    row.resize(limit);  // never draw ids the tokenizer lacks
    const std::int64_t next = models::sample_next(row, history, options.sampling, static_cast<std::uint64_t>(position));
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), next) != options.stop_ids.end()) break;
    history.push_back(next);
    result.ids.push_back(next);
    if (on_token) on_token(next);
    input = Tensor::from_vector(std::vector<std::int64_t>{next}, {1, 1});
  }
  return result;
}

namespace {

std::string read_whole_file(const std::string& flag, const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  TRIDENT_CHECK(fs::exists(st), "{} '{}': no such file", flag, path);
  TRIDENT_CHECK(!fs::is_directory(st), "{} '{}': is a directory, not a file", flag, path);
  std::ifstream in(path, std::ios::binary);
  TRIDENT_CHECK(in.good(), "{} '{}': cannot open the file: {}", flag, path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  TRIDENT_CHECK(!in.bad(), "{} '{}': error reading the file", flag, path);
  return std::move(text).str();
}

// The stream of tokens to evaluate, read in order and at most `limit` long: a dataset's documents,
// read as they are needed (a dataset may not fit in memory), or a text file's ids.
class TokenStream {
 public:
  TokenStream(const EvalOptions& o, const data::Tokenizer& tokenizer, bool encoder)
      : limit_(o.max_tokens > 0 ? o.max_tokens : std::numeric_limits<std::int64_t>::max()) {
    TRIDENT_CHECK(o.data.empty() != o.text.empty(), "evaluate: give a dataset (--data) or a text file (--text), not {}",
                  o.data.empty() ? "neither" : "both");
    if (!o.data.empty()) {
      TRIDENT_CHECK(fs::exists(o.data + ".idx") && fs::exists(o.data + ".bin"),
                    "--data '{}': no dataset there (expected {}.bin and {}.idx)", o.data, o.data, o.data);
      dataset_ = data::IndexedDataset::open(o.data);
      return;
    }
    const std::string text = read_whole_file("--text", o.text);
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

// The masked-LM report of an encoder (see `trident eval`).
EvalResult evaluate_masked_lm(const EvalOptions& o, const InferenceModel& loaded, TokenStream& stream,
                              std::int64_t T) {
  data::MaskingOptions masking;
  try {
    masking = data::masking_for_tokenizer(loaded.tokenizer, o.mlm_probability, o.whole_word, o.seed);
  } catch (const Error& e) {
    TRIDENT_FAIL("checkpoint {}: its tokenizer.json: {}", loaded.dir, e.message());
  }
  autograd::NoGradGuard no_grad;
  nn::ForwardContext ctx;
  ctx.compute_dtype = o.compute_dtype;
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
  EvalResult r{.masked_lm = true, .source = o.data.empty() ? o.text : o.data};
  TRIDENT_CHECK(masked > 0, "'{}': no token was masked in {} tokens (too short, or only special tokens)", r.source,
                tokens);
  r.predicted = masked;
  r.tokens = tokens;
  r.windows = windows;
  r.seq_len = T;
  r.loss = nll / static_cast<double>(masked);
  r.perplexity = std::exp(r.loss);
  r.accuracy = static_cast<double>(correct) / static_cast<double>(masked);
  return r;
}

}  // namespace

EvalResult evaluate(const InferenceModel& loaded, const EvalOptions& o) {
  TRIDENT_CHECK(o.batch_size > 0, "--batch-size {}: expected at least 1", o.batch_size);
  TRIDENT_CHECK(o.seq_len >= 0 && o.max_tokens >= 0, "--seq-len {} and --max-tokens {}: expected numbers >= 0",
                o.seq_len, o.max_tokens);
  const std::int64_t T = o.seq_len > 0 ? o.seq_len : loaded.spec.max_seq_len;
  TRIDENT_CHECK(T <= loaded.spec.max_seq_len, "--seq-len {} exceeds the model's context of {} tokens", T,
                loaded.spec.max_seq_len);
  const bool encoder = models::family(loaded.spec.family).objective == models::Objective::masked_lm;
  TokenStream stream(o, loaded.tokenizer, encoder);
  if (encoder) return evaluate_masked_lm(o, loaded, stream, T);

  autograd::NoGradGuard no_grad;
  nn::ForwardContext ctx;
  ctx.compute_dtype = o.compute_dtype;
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
  EvalResult r{.masked_lm = false, .source = o.data.empty() ? o.text : o.data};
  TRIDENT_CHECK(predicted > 0, "'{}' holds fewer than 2 tokens; evaluating needs at least 2", r.source);
  r.predicted = predicted;
  r.tokens = predicted + 1;
  r.windows = windows;
  r.seq_len = T;
  r.loss = nll / static_cast<double>(predicted);
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace trident::train
