// Preprocessing (Megatron's preprocess_data, oslo's DatasetPreprocessor):
// text, JSONL or Parquet in, Megatron .bin/.idx out, one sequence per document, and the dataset's card
// (PREFIX.card.json: the framing and the tokenizer, which training checks).
//
// Streaming in constant memory: a reader cuts the input into batches of
// documents, worker threads tokenize them (each with its own Encoder cache),
// and a writer appends the results to the dataset in input order, so the
// output is identical for any worker count. At most a fixed number of batches
// are in flight. Empty documents (after tokenization) are skipped and counted.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trident/data/dataset/document_reader.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/tokenizer/tokenizer.h"

namespace trident::data {

struct PreprocessOptions {
  std::vector<std::filesystem::path> inputs;
  // When set, the documents come from it instead of `inputs`: each call fills the next document's whole text
  // and returns true, or returns false at the end (a program's in-memory texts: the Python package's
  // iterables). Called on the calling thread, one document at a time; `format` and `json_key` do not apply.
  std::function<bool(std::string&)> documents = {};
  std::string output_prefix;
  std::optional<InputFormat> format;  // nullopt: by file extension
  std::string json_key = "text";           // JSONL key, and Parquet column, of the text
  bool append_eod = false;
  std::optional<std::string> eod_token = {};  // default: Tokenizer::eod_id()
  bool add_special_tokens = true;        // the tokenizer's post-processor template (e.g. BOS)
  // Masked LM (BERT): every document framed by the tokenizer's single-sequence template ([CLS] doc [SEP]),
  // as Hugging Face run_mlm tokenizes; a document with no tokens of its own is skipped (not written as
  // [CLS] [SEP]). Needs a template that adds tokens; excludes append_eod and add_special_tokens = false.
  bool encoder = false;
  bool skip_bad_lines = false;           // count and skip bad JSONL lines instead of failing
  // The tokenizer as the user named it, recorded in the dataset's card (PREFIX.card.json,
  // data/dataset/dataset_card.h) beside its fingerprint.
  std::string tokenizer_source = {};  // (`= {}`: designated initialisers that omit it stay warning-free)
  int workers = 0;                       // 0: trident::num_threads()
  // Replace an existing PREFIX.bin/.idx; false makes one an error (`trident preprocess` without --overwrite).
  bool overwrite = true;
  // When it turns true (a signal handler's flag), preprocessing stops at the next document with an Error
  // and writes nothing: the temporary files are removed, an existing dataset is left as it was.
  const std::atomic<bool>* stop = nullptr;
};

struct PreprocessProgress {
  std::uint64_t bytes_read = 0;
  std::uint64_t total_bytes = 0;
  std::uint64_t documents = 0;
  std::uint64_t tokens = 0;
  double seconds = 0;
};

struct PreprocessSummary {
  std::uint64_t documents = 0;        // written
  std::uint64_t empty_documents = 0;  // skipped: no tokens
  std::uint64_t bad_lines = 0;        // skipped with skip_bad_lines
  std::uint64_t null_rows = 0;        // Parquet rows whose text is null: skipped
  std::uint64_t tokens = 0;
  std::uint64_t input_bytes = 0;
  double seconds = 0;
  TokenDType dtype = TokenDType::u16;
  int workers = 1;
  double megabytes_per_second() const { return seconds > 0 ? static_cast<double>(input_bytes) / 1e6 / seconds : 0; }
};

// `progress` (optional) is called from the calling thread about once a second. The temporary files of
// an earlier run on the same prefix that was killed (its process gone) are removed first: the paths
// go to `stale` when given.

PreprocessSummary preprocess(const Tokenizer& tokenizer, const PreprocessOptions& options,
                             const std::function<void(const PreprocessProgress&)>& progress = {},
                             std::vector<std::filesystem::path>* stale = nullptr);

}  // namespace trident::data
