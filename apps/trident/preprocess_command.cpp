// trident preprocess: text, JSONL or Parquet -> Megatron .bin/.idx (docs/data.md).
//
//   trident preprocess --input FILE... --tokenizer tokenizer.json --output-prefix PREFIX
//                      [--json-key text] [--append-eod] [--workers N] [--format auto|text|jsonl|parquet|file]
//                      [--skip-bad-lines] [--eod-token TOK] [--no-special-tokens] [--encoder] [--quiet] [--overwrite]
//
// SIGINT/SIGTERM stop it at the next document: nothing is written (the temporary files go), an existing
// dataset stays, and it exits 128 + the signal's number after one line saying so.
#include <fmt/format.h>

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include <filesystem>

#include "commands.h"
#include "trident/core/error.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/preprocess.h"

namespace trident::cli {

namespace {

std::atomic<bool> stop_requested{false};
std::atomic<int> stop_signal{0};
extern "C" void on_preprocess_stop_signal(int sig) {
  stop_signal.store(sig, std::memory_order_relaxed);
  stop_requested.store(true, std::memory_order_relaxed);
}

// SIGINT/SIGTERM set the stop flag for the command's duration; the previous handlers come back after.
class StopOnSignals {
 public:
  StopOnSignals() : int_(std::signal(SIGINT, on_preprocess_stop_signal)), term_(std::signal(SIGTERM, on_preprocess_stop_signal)) {}
  ~StopOnSignals() {
    std::signal(SIGINT, int_);
    std::signal(SIGTERM, term_);
  }
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  void (*int_)(int);
  void (*term_)(int);
};

}  // namespace

void add_preprocess_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("preprocess", "Tokenize text/JSONL/Parquet into a Megatron .bin/.idx dataset");
  struct Args {
    std::vector<std::string> inputs;
    std::string tokenizer, prefix, json_key = "text", format = "auto", eod_token, lower;
    bool append_eod = false, skip_bad = false, no_special = false, encoder = false, quiet = false, overwrite = false;
    int workers = 0;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--input,-i", args->inputs, "Input files: plain text (one document per line), JSONL or Parquet")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--tokenizer,-t", args->tokenizer, "tokenizer.json, GPT-2 vocab.json, BERT vocab.txt, or a directory")
      ->required();
  cmd->add_option("--do-lower-case", args->lower,
                  "vocab.txt only: true or false (default: tokenizer_config.json's, else true)")
      ->check(CLI::IsMember({"true", "false"}));
  cmd->add_option("--output-prefix,-o", args->prefix, "Writes PREFIX.bin and PREFIX.idx")->required();
  cmd->add_option("--json-key", args->json_key, "JSONL key, or Parquet column, holding the document text")->capture_default_str();
  cmd->add_option("--format", args->format,
                  "auto (.jsonl/.json are JSONL, .parquet Parquet, else text), text (a document per line), jsonl, "
                  "parquet, file (each file is one document)")
      ->check(CLI::IsMember({"auto", "text", "jsonl", "parquet", "file"}))
      ->capture_default_str();
  cmd->add_flag("--append-eod", args->append_eod, "Append the end-of-document token to every document");
  cmd->add_option("--eod-token", args->eod_token,
                  "The end-of-document token (default: the first of " + data::end_of_document_names_text() +
                      " in the vocabulary)");
  cmd->add_flag("--skip-bad-lines", args->skip_bad, "Count and skip JSONL lines that are not JSON or lack the key");
  cmd->add_flag("--no-special-tokens", args->no_special, "Do not add the tokenizer's template tokens (e.g. BOS)");
  cmd->add_flag("--encoder", args->encoder,
                "Masked-LM (BERT) data: frame every document with the tokenizer's single-sequence template "
                "([CLS] doc [SEP]) instead of an end-of-document token, as Hugging Face run_mlm does; documents with "
                "no tokens are skipped. Train on non-overlapping seq_len windows (docs/data.md, masked LM)");
  cmd->add_option("--workers,-j", args->workers, "Encoding threads (default: cores / ranks on this node, as trident info shows)");
  cmd->add_flag("--quiet,-q", args->quiet, "No progress line: the one-line summary only");
  cmd->add_flag("--overwrite", args->overwrite, "Replace an existing PREFIX.bin/.idx (else an error)");
  cmd->callback([args] {
    data::PreprocessOptions o;
    for (const auto& f : args->inputs) o.inputs.emplace_back(f);
    o.output_prefix = args->prefix;
    // "d/" would write the hidden files d/.bin and d/.idx.
    TRIDENT_CHECK(!args->prefix.empty() && !std::filesystem::path(args->prefix).filename().empty() &&
                      std::filesystem::path(args->prefix).filename() != "." &&
                      std::filesystem::path(args->prefix).filename() != "..",
                  "--output-prefix '{}' names a directory: give a file prefix (e.g. '{}corpus' for corpus.bin and "
                  "corpus.idx)",
                  args->prefix, args->prefix.empty() || args->prefix.back() == '/' ? args->prefix : args->prefix + "/");
    o.json_key = args->json_key;
    if (args->format == "text") o.format = data::InputFormat::text;
    if (args->format == "jsonl") o.format = data::InputFormat::jsonl;
    if (args->format == "parquet") o.format = data::InputFormat::parquet;
    if (args->format == "file") o.format = data::InputFormat::text_file;
    o.append_eod = args->append_eod;
    if (!args->eod_token.empty()) o.eod_token = args->eod_token;
    o.skip_bad_lines = args->skip_bad;
    o.add_special_tokens = !args->no_special;
    o.encoder = args->encoder;
    o.tokenizer_source = args->tokenizer;
    o.workers = args->workers;
    o.overwrite = args->overwrite;
    o.stop = &stop_requested;
    TRIDENT_CHECK(args->workers >= 0, "--workers {} is negative", args->workers);
    const auto tok = data::Tokenizer::load(
        args->tokenizer, args->lower.empty() ? std::nullopt : std::optional<bool>(args->lower == "true"));
    const bool tty = isatty(fileno(stderr));
    auto progress = [&](const data::PreprocessProgress& p) {
      if (args->quiet) return;
      const double pct = p.total_bytes ? 100.0 * static_cast<double>(p.bytes_read) / static_cast<double>(p.total_bytes) : 100.0;
      fmt::print(stderr, "{}preprocess: {:5.1f}% {:.1f}/{:.1f} MB, {} documents, {} tokens, {:.1f} MB/s{}",
                 tty ? "\r" : "", pct, static_cast<double>(p.bytes_read) / 1e6,
                 static_cast<double>(p.total_bytes) / 1e6, p.documents, p.tokens,
                 p.seconds > 0 ? static_cast<double>(p.bytes_read) / 1e6 / p.seconds : 0.0, tty ? "" : "\n");
    };
    std::vector<std::filesystem::path> stale;
    data::PreprocessSummary s;
    {
      const StopOnSignals on_signals;
      try {
        s = data::preprocess(tok, o, progress, &stale);
      } catch (const Error& e) {
        if (!stop_requested.load()) throw;
        const int sig = stop_signal.load();
        std::fflush(stdout);
        fmt::print(stderr, "{}trident: preprocess: stopped by {}: {}.bin/.idx not written (no temporary file left)\n",
                   tty && !args->quiet ? "\n" : "", sig == SIGINT ? "SIGINT" : "SIGTERM", args->prefix);
        exit_status() = 128 + sig;
        return;
      }
    }
    // The one-line summary, with --quiet too (it only drops the progress line).
    if (tty && !args->quiet) fmt::print(stderr, "\n");
    fmt::print(stderr,
               "preprocess: {} documents, {} tokens ({}), {:.1f} MB in {:.2f} s = {:.1f} MB/s with {} workers; "
               "skipped {} empty documents, {} bad lines{} -> {}.bin/.idx{}\n",
               s.documents, s.tokens, data::token_dtype_name(s.dtype), static_cast<double>(s.input_bytes) / 1e6,
               s.seconds, s.megabytes_per_second(), s.workers, s.empty_documents, s.bad_lines,
               s.null_rows ? fmt::format(", {} null rows", s.null_rows) : "", args->prefix,
               stale.empty() ? ""
                             : fmt::format(" (removed {} temporary file(s) a killed run had left: {})", stale.size(),
                                           stale.front().filename().string()));
  });
}

}  // namespace trident::cli
