// trident generate --checkpoint DIR --prompt TEXT [sampling options]
//
// Loads a checkpoint (a step directory, or the newest checkpoint that verifies
// under a run or checkpoint root), encodes the prompt, and streams generated
// text to stdout as the tokens come (data::DecodeStream: each piece once its
// characters are complete), using a KV cache (train::generate, train/inference.h).
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
#include "trident/data/tokenizer/tokenizer.h"
#include "trident/train/inference.h"

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
  const train::InferenceModel loaded = train::load_inference_model(o.checkpoint, /*generates=*/true);
  const data::Tokenizer& tokenizer = loaded.tokenizer;
  const bool printer = loaded.tp.rank() == 0;
  const std::vector<std::int32_t> prompt_ids = tokenizer.encode(o.prompt, /*add_special_tokens=*/false);
  TRIDENT_CHECK(!prompt_ids.empty(), "--prompt encodes to no tokens; give some text");
  train::GenerateOptions go;
  go.max_new_tokens = o.max_new_tokens;
  go.sampling.temperature = o.greedy ? 0.0 : o.temperature;
  go.sampling.top_k = o.top_k;
  go.sampling.top_p = o.top_p;
  go.sampling.no_repeat_ngram = o.no_repeat_ngram;
  go.sampling.seed = o.seed;
  if (!o.ignore_eos) go.stop_ids = train::default_stop_ids(loaded.spec, tokenizer);
  go.vocab_limit = tokenizer.vocab_size();
  go.compute_dtype = precision_dtype(o.precision);
  auto emit = [printer](const std::string& text) {
    if (!printer) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  emit(o.prompt);
  data::DecodeStream stream(tokenizer, prompt_ids);
  const std::vector<std::int64_t> prompt(prompt_ids.begin(), prompt_ids.end());
  const train::GenerateResult result = train::generate(
      *loaded.model, prompt, go, [&](std::int64_t id) { emit(stream.step(static_cast<std::int32_t>(id))); });
  emit(stream.finish());
  emit("\n");
  if (result.out_of_context && printer) {
    fmt::print(stderr, "(stopped after {} new tokens: the model's context is {} tokens)\n", result.ids.size(),
               loaded.spec.max_seq_len);
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
