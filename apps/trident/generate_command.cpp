// trident generate --checkpoint DIR --prompt TEXT [sampling options]
//
// Loads a checkpoint (a step directory, or the newest checkpoint that verifies
// under a run or checkpoint root), encodes the prompt, and streams generated
// text to stdout as the tokens come (data::DecodeStream: each piece once its
// characters are complete), using a KV cache.
//
// Under `trident launch -n T` (mpirun) the model is tensor-parallel over the T
// ranks: each loads only its shard from the checkpoint, every rank runs the
// forward pass and receives the gathered logits, draws the same token from the
// same counter-based sampler, and rank 0 prints.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "trident/autograd/autograd.h"
#include "trident/data/tokenizer/tokenizer.h"
#include "trident/models/transformer_lm.h"
#include "trident/models/sampling.h"

namespace trident::cli {

namespace {

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;
  std::int64_t max_new_tokens = 64;
  double temperature = 1.0;
  std::int64_t top_k = 0;
  double top_p = 1.0;
  std::int64_t no_repeat_ngram = 0;
  std::uint64_t seed = 0;
  bool greedy = false;
  bool ignore_eos = false;
  std::string precision = "fp32";
};

void generate(const GenerateOptions& o) {
  const InferenceModel loaded = load_inference_model(o.checkpoint, /*generates=*/true);
  const models::TransformerSpec& spec = loaded.spec;
  const data::Tokenizer& tokenizer = loaded.tokenizer;
  const models::TransformerLM& model = *loaded.model;
  const bool printer = loaded.tp.rank() == 0;
  std::vector<std::int32_t> prompt_ids = tokenizer.encode(o.prompt, /*add_special_tokens=*/false);
  TRIDENT_CHECK(!prompt_ids.empty(), "--prompt encodes to no tokens; give some text");
  std::vector<std::int64_t> history(prompt_ids.begin(), prompt_ids.end());
  TRIDENT_CHECK(static_cast<std::int64_t>(history.size()) < spec.max_seq_len,
                "the prompt has {} tokens; the model's context is {}", history.size(), spec.max_seq_len);
  models::SamplingOptions so;
  so.temperature = o.greedy ? 0.0 : o.temperature;
  so.top_k = o.top_k;
  so.top_p = o.top_p;
  so.no_repeat_ngram = o.no_repeat_ngram;
  so.seed = o.seed;

  autograd::NoGradGuard no_grad;
  nn::KVCache cache(static_cast<std::size_t>(spec.n_layer));
  nn::ForwardContext ctx;
  ctx.cache = &cache;
  ctx.compute_dtype = precision_dtype(o.precision);
  auto emit = [printer](const std::string& text) {
    if (!printer) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  emit(o.prompt);
  data::DecodeStream stream(tokenizer, prompt_ids);
  // Generation ends at an eos id of config.json (Llama 3 instruct lists several), else at the
  // tokenizer's end-of-document token.
  std::vector<std::int64_t> stop = spec.eos_token_ids;
  if (stop.empty() && tokenizer.eod_id()) stop.push_back(*tokenizer.eod_id());
  if (o.ignore_eos) stop.clear();
  Tensor input = Tensor::from_vector(history, {1, static_cast<std::int64_t>(history.size())});
  std::int64_t position = 0;
  bool out_of_context = false;
  for (std::int64_t i = 0; i < o.max_new_tokens; ++i) {
    if (position + input.size(1) > spec.max_seq_len) {
      out_of_context = true;
      break;
    }
    ctx.position_offset = position;
    Tensor logits = model.forward(input, ctx).data();
    position += input.size(1);
    const std::int64_t V = spec.vocab_size;
    const Tensor last = logits.view({-1, V}).select0(logits.numel() / V - 1).to(DType::f32);
    std::vector<float> row = last.to_vector<float>();
    row.resize(static_cast<std::size_t>(tokenizer.vocab_size()));  // never sample ids the tokenizer lacks
    const std::int64_t next = models::sample_next(row, history, so, static_cast<std::uint64_t>(position));
    if (std::find(stop.begin(), stop.end(), next) != stop.end()) break;
    history.push_back(next);
    emit(stream.step(static_cast<std::int32_t>(next)));
    input = Tensor::from_vector(std::vector<std::int64_t>{next}, {1, 1});
  }
  emit(stream.finish());
  emit("\n");
  if (out_of_context && printer) {
    fmt::print(stderr, "(stopped after {} new tokens: the model's context is {} tokens)\n",
               static_cast<std::int64_t>(history.size() - prompt_ids.size()), spec.max_seq_len);
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate text from a checkpoint (KV cache, streaming)");
  auto o = std::make_shared<GenerateOptions>();
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint directory, or a run directory")->required();
  cmd->add_option("--prompt", o->prompt, "Text to continue")->required();
  // Checked as the command line is parsed: a bad value is a usage error before the model loads.
  const auto number_in = [](const char* range, bool (*ok)(double)) {
    return CLI::Validator(
        [range, ok](const std::string& text) {
          char* end = nullptr;
          const double v = std::strtod(text.c_str(), &end);
          const bool number = !text.empty() && end == text.c_str() + text.size();
          return number && ok(v) ? std::string() : fmt::format("'{}' is not {}", text, range);
        },
        range);
  };
  const CLI::Validator non_negative = number_in("a number >= 0", [](double v) { return v >= 0; });
  const CLI::Validator top_p_range = number_in("in (0, 1]", [](double v) { return v > 0 && v <= 1; });
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate")
      ->check(non_negative)
      ->capture_default_str();
  // inf would sample uniformly, whatever the model says.
  const CLI::Validator finite_non_negative =
      number_in("a finite number >= 0", [](double v) { return std::isfinite(v) && v >= 0; });
  cmd->add_option("--temperature", o->temperature, "Sampling temperature (0 = greedy)")
      ->check(finite_non_negative)
      ->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "Sample among the k most likely tokens (0 = all)")
      ->check(non_negative)
      ->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling mass (1 = off)")->check(top_p_range)->capture_default_str();
  cmd->add_option("--no-repeat-ngram", o->no_repeat_ngram, "Never repeat an n-gram of this size (0 = off)")
      ->check(non_negative)
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed of the sampler")->capture_default_str();
  cmd->add_flag("--greedy", o->greedy, "Always take the most likely token");
  cmd->add_flag("--ignore-eos", o->ignore_eos,
                "Go on past the eos token (config.json's eos_token_id, else the tokenizer's end of document; it is "
                "printed) until --max-new-tokens or the context ends");
  add_precision_option(*cmd, o->precision);
  cmd->callback([o] { generate(*o); });
}

}  // namespace trident::cli
