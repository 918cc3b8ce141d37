// trident tokenizer {encode,decode,train}: the tokenizer from the command line.
//
//   trident tokenizer encode --tokenizer T [--input FILE] [--no-special-tokens]
//       prints the ids of the text (stdin or FILE), separated by spaces.
//   trident tokenizer decode --tokenizer T [--ids "1 2 3"] [--skip-special-tokens]
//       prints the bytes of whitespace-separated ids (stdin or --ids), as is.
//   trident tokenizer train --input FILE... --vocab-size N [--special-token TOK]...
//                           --output tokenizer.json
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "commands.h"
#include "trident/core/error.h"
#include "trident/data/bpe_trainer.h"
#include "trident/data/tokenizer.h"

namespace trident::cli {
namespace {

std::string read_all(const std::string& file) {
  if (file.empty() || file == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    return std::move(ss).str();
  }
  return read_file_option("--input", file);
}

void write_stdout(std::string_view s) {
  if (!s.empty()) {
    TRIDENT_CHECK(std::fwrite(s.data(), 1, s.size(), stdout) == s.size(), "error writing to standard output");
  }
  std::fflush(stdout);
}

std::vector<std::int32_t> parse_ids(std::string_view text, std::string_view source) {
  std::vector<std::int32_t> ids;
  std::size_t pos = 0, index = 0;
  auto is_space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  while (true) {
    while (pos < text.size() && is_space(text[pos])) ++pos;
    if (pos == text.size()) break;
    std::size_t end = pos;
    while (end < text.size() && !is_space(text[end])) ++end;
    const std::string_view word = text.substr(pos, end - pos);
    std::int64_t value = 0;
    bool ok = word.size() <= 10;
    for (char c : word) {
      ok = ok && c >= '0' && c <= '9';
      value = value * 10 + (c - '0');
    }
    TRIDENT_CHECK(ok && value < (1LL << 31), "{}: item {} is '{}', expected a token id (a non-negative integer)",
                  source, index, word);
    ids.push_back(static_cast<std::int32_t>(value));
    pos = end;
    ++index;
  }
  return ids;
}

}  // namespace

void add_tokenizer_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenizer", "Encode, decode and train byte-level BPE tokenizers");
  cmd->require_subcommand(1);

  // encode
  {
    auto* sub = cmd->add_subcommand("encode", "Print the token ids of text (stdin or --input)");
    struct Args {
      std::string tokenizer, input;
      bool no_special = false;
    };
    auto args = std::make_shared<Args>();
    sub->add_option("--tokenizer,-t", args->tokenizer,
                    "tokenizer.json, GPT-2 vocab.json (merges.txt beside it), or a directory with either")
        ->required();
    sub->add_option("--input,-i", args->input, "Text file to encode (default: standard input)");
    sub->add_flag("--no-special-tokens", args->no_special, "Do not add the post-processor's special tokens");
    sub->callback([args] {
      const auto tok = data::Tokenizer::load(args->tokenizer);
      const std::string text = read_all(args->input);
      data::Encoder enc(tok);
      std::vector<std::int32_t> ids;
      enc.encode(text, ids, !args->no_special);
      fmt::memory_buffer buf;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i) buf.push_back(' ');
        fmt::format_to(std::back_inserter(buf), "{}", ids[i]);
      }
      buf.push_back('\n');
      write_stdout({buf.data(), buf.size()});
    });
  }

  // decode
  {
    auto* sub = cmd->add_subcommand("decode", "Print the text of whitespace-separated ids (stdin or --ids)");
    struct Args {
      std::string tokenizer, ids;
      bool have_ids = false, skip_special = false;
    };
    auto args = std::make_shared<Args>();
    sub->add_option("--tokenizer,-t", args->tokenizer, "tokenizer.json, GPT-2 vocab.json, or a directory")->required();
    auto* ids_opt = sub->add_option("--ids", args->ids, "The ids, e.g. \"15496 995\" (default: standard input)");
    sub->add_flag("--skip-special-tokens", args->skip_special, "Leave special tokens out of the text");
    sub->callback([args, ids_opt] {
      const auto tok = data::Tokenizer::load(args->tokenizer);
      const bool from_arg = ids_opt->count() > 0;
      const std::string text = from_arg ? args->ids : read_all("");
      const auto ids = parse_ids(text, from_arg ? "--ids" : "standard input");
      write_stdout(tok.decode(ids, args->skip_special));
    });
  }

  // train
  {
    auto* sub = cmd->add_subcommand("train", "Train a byte-level BPE tokenizer and write its tokenizer.json");
    struct Args {
      std::vector<std::string> inputs, special_tokens;
      std::string output;
      std::int64_t vocab_size = 0, min_frequency = 2;
      bool quiet = false;
    };
    auto args = std::make_shared<Args>();
    sub->add_option("--input,-i", args->inputs, "Text files to train on")->required()->check(CLI::ExistingFile);
    sub->add_option("--vocab-size", args->vocab_size, "Vocabulary size: special tokens + 256 bytes + merges")
        ->required();
    sub->add_option("--special-token", args->special_tokens, "A special token (repeatable; ids 0, 1, ... in order)");
    sub->add_option("--min-frequency", args->min_frequency, "Stop merging pairs seen fewer times than this")
        ->capture_default_str();
    sub->add_option("--output,-o", args->output, "Where to write tokenizer.json")->required();
    sub->add_flag("--quiet,-q", args->quiet, "No progress output");
    sub->callback([args] {
      TRIDENT_CHECK(args->vocab_size > 0 && args->vocab_size < (1LL << 31), "--vocab-size {} is out of range",
                    args->vocab_size);
      prepare_output_option("--output", args->output, false);  // before the training it would lose
      data::BpeTrainerOptions options;
      options.vocab_size = static_cast<std::int32_t>(args->vocab_size);
      options.special_tokens = args->special_tokens;
      options.min_frequency = args->min_frequency;
      if (!args->quiet) options.log = [](std::string_view line) { fmt::print(stderr, "{}\n", line); };
      data::BpeTrainer trainer(options);
      for (const auto& f : args->inputs) trainer.feed_file(f);
      const data::TrainedBpe result = trainer.train();
      data::write_tokenizer_json(result, args->output);
      if (!args->quiet) {
        fmt::print(stderr, "wrote {} ({} tokens, {} merges)\n", args->output, result.vocab.size(), result.merges.size());
      }
    });
  }
}

}  // namespace trident::cli
