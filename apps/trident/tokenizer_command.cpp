// trident tokenizer {encode,decode,train}: the tokenizer from the command line.
//
//   trident tokenizer encode --tokenizer T [--input FILE] [--pair FILE] [--type-ids]
//                            [--truncate] [--no-special-tokens] [--do-lower-case true|false]
//       prints the ids of the text (stdin or FILE), separated by spaces; with
//       --pair, of the pair (text, FILE) through the pair template; with
//       --type-ids, a second line with each id's type id. With --jsonl, the input
//       is JSON Lines: each document (the --json-key string) is encoded alone
//       and printed as one line of ids, as Hugging Face's encode_batch does.
//   trident tokenizer decode --tokenizer T [--ids "1 2 3"] [--skip-special-tokens] [--jsonl]
//       prints the bytes of whitespace-separated ids (stdin or --ids), as is;
//       with --jsonl, each input line is one sequence and prints as one JSON string.
//   trident tokenizer train [--model bpe|wordpiece] --input FILE... --vocab-size N
//                           [--special-token TOK]... [--json-key text] --output tokenizer.json
//       trains on text files, or on the documents of JSONL and Parquet files.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "trident/core/error.h"
#include "trident/data/dataset/document_reader.h"
#include "trident/data/tokenizer/bpe_trainer.h"
#include "trident/data/tokenizer/tokenizer.h"
#include "trident/data/tokenizer/wordpiece_trainer.h"

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

// --do-lower-case for a WordPiece vocab.txt: unset means tokenizer_config.json's or true.
std::optional<bool> lower_case_option(const std::string& value) {
  if (value.empty()) return std::nullopt;
  TRIDENT_CHECK(value == "true" || value == "false", "--do-lower-case: expected true or false, got '{}'", value);
  return value == "true";
}

template <typename T>
void print_numbers(fmt::memory_buffer& buf, const std::vector<T>& values) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) buf.push_back(' ');
    fmt::format_to(std::back_inserter(buf), "{}", values[i]);
  }
  buf.push_back('\n');
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

// `tokenizer train`'s inputs: a text file as it is; a JSONL or Parquet file's documents (the string at
// `json_key` of each, never the raw records), each ended by a newline, in blocks of whole documents: the
// text that a file of those documents one per line would give.
template <typename Trainer>
void feed_inputs(Trainer& trainer, const std::vector<std::string>& inputs, const std::string& json_key) {
  for (const std::string& file : inputs) {
    if (data::detect_input_format(file) == data::InputFormat::text) {
      trainer.feed_file(file);
      continue;
    }
    data::DocumentReader reader({file}, std::nullopt, json_key);
    data::RawDocument doc;
    std::string block;
    while (reader.next(doc)) {
      block += data::extract_document_text(doc, reader.format_of(doc.file_index), json_key, file);
      block += '\n';
      if (block.size() >= (std::size_t{4} << 20)) {
        trainer.feed(block);
        block.clear();
      }
    }
    if (!block.empty()) trainer.feed(block);
  }
}

}  // namespace

void add_tokenizer_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenizer", "Encode, decode and train tokenizers (byte-level BPE, WordPiece)");
  cmd->require_subcommand(1);

  // encode
  {
    auto* sub = cmd->add_subcommand("encode", "Print the token ids of text (stdin or --input)");
    struct Args {
      std::string tokenizer, input, pair, lower, json_key = "text";
      bool no_special = false, type_ids = false, truncate = false, jsonl = false;
    };
    auto args = std::make_shared<Args>();
    sub->add_option("--tokenizer,-t", args->tokenizer,
                    "tokenizer.json, GPT-2 vocab.json (merges.txt beside it), WordPiece vocab.txt, or a directory "
                    "with one of them")
        ->required();
    sub->add_option("--input,-i", args->input, "Text file to encode (default: standard input)");
    sub->add_option("--pair", args->pair, "Encode (text, this file's text) as a pair through the pair template");
    sub->add_flag("--type-ids", args->type_ids, "Print a second line with each id's type (segment) id");
    sub->add_flag("--truncate", args->truncate, "Apply the tokenizer.json's truncation to a single text too");
    sub->add_flag("--no-special-tokens", args->no_special, "Do not add the post-processor's special tokens");
    sub->add_option("--do-lower-case", args->lower,
                    "vocab.txt only: true or false (default: tokenizer_config.json's, else true)");
    sub->add_flag("--jsonl", args->jsonl,
                  "The input is JSON Lines: encode each document alone and print one line of ids per document");
    sub->add_option("--json-key", args->json_key, "With --jsonl: the key holding each document's text")
        ->capture_default_str();
    sub->callback([args] {
      TRIDENT_CHECK(!args->jsonl || (args->pair.empty() && !args->type_ids),
                    "--jsonl encodes single documents: it cannot be combined with {}",
                    args->pair.empty() ? "--type-ids" : "--pair");
      const auto tok = data::Tokenizer::load(args->tokenizer, lower_case_option(args->lower));
      data::Encoder enc(tok);
      enc.set_truncate(args->truncate);
      std::vector<std::int32_t> ids;
      std::vector<std::uint32_t> types;
      const std::string text = read_all(args->input);
      if (args->jsonl) {
        const std::filesystem::path source = args->input.empty() || args->input == "-" ? "standard input" : args->input;
        fmt::memory_buffer buf;
        data::RawDocument doc;
        for (std::size_t pos = 0; pos < text.size();) {
          const std::size_t end = std::min(text.find('\n', pos), text.size());
          doc.content.assign(text, pos, end - pos);
          ++doc.line;
          pos = end + 1;
          if (doc.content.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines, as preprocess
          ids.clear();
          enc.encode(data::extract_document_text(doc, data::InputFormat::jsonl, args->json_key, source), ids,
                     !args->no_special);
          print_numbers(buf, ids);
        }
        write_stdout({buf.data(), buf.size()});
        return;
      }
      if (!args->pair.empty()) {
        enc.encode_pair(text, read_file_option("--pair", args->pair), ids, !args->no_special, &types);
      } else {
        enc.encode(text, ids, !args->no_special);
        types.assign(ids.size(), 0);
      }
      fmt::memory_buffer buf;
      print_numbers(buf, ids);
      if (args->type_ids) print_numbers(buf, types);
      write_stdout({buf.data(), buf.size()});
    });
  }

  // decode
  {
    auto* sub = cmd->add_subcommand("decode", "Print the text of whitespace-separated ids (stdin or --ids)");
    struct Args {
      std::string tokenizer, ids, lower;
      bool have_ids = false, skip_special = false, jsonl = false;
    };
    auto args = std::make_shared<Args>();
    sub->add_option("--tokenizer,-t", args->tokenizer, "tokenizer.json, GPT-2 vocab.json, vocab.txt, or a directory")
        ->required();
    sub->add_option("--do-lower-case", args->lower, "vocab.txt only: true or false");
    auto* ids_opt = sub->add_option("--ids", args->ids, "The ids, e.g. \"15496 995\" (default: standard input)");
    sub->add_flag("--skip-special-tokens", args->skip_special, "Leave special tokens out of the text");
    sub->add_flag("--jsonl", args->jsonl,
                  "Each input line is one sequence of ids; print each one's text as a JSON string on its own line");
    sub->callback([args, ids_opt] {
      const auto tok = data::Tokenizer::load(args->tokenizer, lower_case_option(args->lower));
      const bool from_arg = ids_opt->count() > 0;
      const std::string text = from_arg ? args->ids : read_all("");
      const std::string source = from_arg ? "--ids" : "standard input";
      if (!args->jsonl) {
        write_stdout(tok.decode(parse_ids(text, source), args->skip_special));
        return;
      }
      std::string out;
      std::size_t line = 0;
      for (std::size_t pos = 0; pos < text.size(); ++line) {
        const std::size_t end = std::min(text.find('\n', pos), text.size());
        const auto ids =
            parse_ids(std::string_view(text).substr(pos, end - pos), fmt::format("{} line {}", source, line + 1));
        // Invalid UTF-8 (byte tokens cut mid-character) is written as U+FFFD, as a Python str shows it.
        out += nlohmann::json(tok.decode(ids, args->skip_special))
                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += '\n';
        pos = end + 1;
      }
      write_stdout(out);
    });
  }

  // train
  {
    auto* sub =
        cmd->add_subcommand("train", "Train a byte-level BPE or a WordPiece tokenizer; write its tokenizer.json");
    struct Args {
      std::vector<std::string> inputs, special_tokens;
      std::string output, model = "bpe", json_key = "text";
      std::int64_t vocab_size = 0, min_frequency = 2;
      bool quiet = false;
    };
    auto args = std::make_shared<Args>();
    sub->add_option("--input,-i", args->inputs,
                    "Files to train on: text, or the documents of JSONL (*.jsonl, *.json) and Parquet files")
        ->required()
        ->check(CLI::ExistingFile);
    sub->add_option("--json-key", args->json_key, "JSONL and Parquet inputs: the key (column) of the text")
        ->capture_default_str();
    sub->add_option("--vocab-size", args->vocab_size, "Vocabulary size: special tokens + 256 bytes + merges")
        ->required();
    sub->add_option("--special-token", args->special_tokens, "A special token (repeatable; ids 0, 1, ... in order)");
    sub->add_option("--min-frequency", args->min_frequency, "Stop merging pairs seen fewer times than this")
        ->capture_default_str();
    sub->add_option("--output,-o", args->output, "Where to write tokenizer.json")->required();
    sub->add_flag("--quiet,-q", args->quiet, "No progress output");
    sub->add_option(
           "--model", args->model,
           "bpe (byte-level, GPT-2 style) or wordpiece (BERT style: lowercase, [PAD] [UNK] [CLS] [SEP] [MASK])")
        ->capture_default_str();
    sub->callback([args] {
      TRIDENT_CHECK(args->vocab_size > 0 && args->vocab_size < (1LL << 31), "--vocab-size {} is out of range",
                    args->vocab_size);
      TRIDENT_CHECK(args->model == "bpe" || args->model == "wordpiece", "--model: expected bpe or wordpiece, got '{}'",
                    args->model);
      prepare_output_option("--output", args->output, false);  // before the training it would lose
      if (args->model == "wordpiece") {
        TRIDENT_CHECK(args->special_tokens.empty(),
                      "--special-token: a WordPiece tokenizer has BERT's special tokens [PAD] [UNK] [CLS] [SEP] "
                      "[MASK] (ids 0..4); other special tokens are not supported");
        data::WordPieceTrainerOptions options;
        options.vocab_size = static_cast<std::int32_t>(args->vocab_size);
        options.min_frequency = args->min_frequency;
        if (!args->quiet) options.log = [](std::string_view line) { fmt::print(stderr, "{}\n", line); };
        data::WordPieceTrainer trainer(options);
        feed_inputs(trainer, args->inputs, args->json_key);
        const std::vector<std::string> tokens = trainer.train();
        data::write_wordpiece_tokenizer_json(tokens, args->output);
        if (!args->quiet) fmt::print(stderr, "wrote {} ({} tokens)\n", args->output, tokens.size());
        return;
      }
      data::BpeTrainerOptions options;
      options.vocab_size = static_cast<std::int32_t>(args->vocab_size);
      options.special_tokens = args->special_tokens;
      options.min_frequency = args->min_frequency;
      if (!args->quiet) options.log = [](std::string_view line) { fmt::print(stderr, "{}\n", line); };
      data::BpeTrainer trainer(options);
      feed_inputs(trainer, args->inputs, args->json_key);
      const data::TrainedBpe result = trainer.train();
      data::write_tokenizer_json(result, args->output);
      if (!args->quiet) {
        fmt::print(stderr, "wrote {} ({} tokens, {} merges)\n", args->output, result.vocab.size(),
                   result.merges.size());
      }
    });
  }
}

}  // namespace trident::cli
