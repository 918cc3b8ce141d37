#include "trident/data/dataset/preprocess.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "trident/core/atomic_file.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/data/dataset/dataset_card.h"
#include "trident/data/dataset/indexed_dataset.h"

namespace trident::data {
namespace {

constexpr std::size_t kBatchBytes = 1 << 20;  // text per batch
constexpr std::size_t kBatchDocs = 4096;

struct Batch {
  std::uint64_t seq = 0;
  std::vector<RawDocument> docs;
  // Results: tokens of all documents, concatenated, and each document's length
  // (-1: bad line skipped).
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> lengths;
};

// The pipeline's shared state: a bounded queue of batches to encode and an
// ordered map of encoded batches waiting for the writer.
class Pipeline {
 public:
  explicit Pipeline(std::size_t max_in_flight) : max_in_flight_(max_in_flight) {}

  // Reader: blocks while too many batches are in flight. False once failed.
  bool push(std::unique_ptr<Batch> b) {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return in_flight_ < max_in_flight_ || error_; });
    if (error_) return false;
    ++in_flight_;
    todo_.push_back(std::move(b));
    cv_.notify_all();
    return true;
  }
  void close_input() {
    std::lock_guard lock(m_);
    input_closed_ = true;
    cv_.notify_all();
  }
  // Workers: the next batch to encode, or null when done.
  std::unique_ptr<Batch> take() {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return !todo_.empty() || input_closed_ || error_; });
    if (error_ || todo_.empty()) return nullptr;
    auto b = std::move(todo_.front());
    todo_.pop_front();
    return b;
  }
  void done(std::unique_ptr<Batch> b) {
    std::lock_guard lock(m_);
    const std::uint64_t seq = b->seq;
    ready_.emplace(seq, std::move(b));
    cv_.notify_all();
  }
  // Writer: the batch with the next sequence number, or null at the end.
  std::unique_ptr<Batch> next_ready(std::uint64_t seq) {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return ready_.count(seq) || error_ || (input_closed_ && in_flight_ == 0); });
    if (error_ || !ready_.count(seq)) return nullptr;
    auto b = std::move(ready_[seq]);
    ready_.erase(seq);
    return b;
  }
  void written() {
    std::lock_guard lock(m_);
    --in_flight_;
    cv_.notify_all();
  }
  void fail(std::exception_ptr e) {
    std::lock_guard lock(m_);
    if (!error_) error_ = e;
    cv_.notify_all();
  }
  std::exception_ptr error() {
    std::lock_guard lock(m_);
    return error_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Batch>> todo_;
  std::map<std::uint64_t, std::unique_ptr<Batch>> ready_;
  std::size_t in_flight_ = 0;
  const std::size_t max_in_flight_;
  bool input_closed_ = false;
  std::exception_ptr error_;
};

}  // namespace

PreprocessSummary preprocess(const Tokenizer& tokenizer, const PreprocessOptions& options,
                             const std::function<void(const PreprocessProgress&)>& progress,
                             std::vector<std::filesystem::path>* stale) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  TRIDENT_CHECK(!options.output_prefix.empty(), "no output prefix");
  const std::size_t template_tokens = tokenizer.parts().prefix_ids.size() + tokenizer.parts().suffix_ids.size();
  if (options.encoder) {
    TRIDENT_CHECK(!options.append_eod,
                  "--encoder frames each document with the tokenizer's template ([CLS] doc [SEP]) instead of an "
                  "end-of-document token; drop --append-eod");
    TRIDENT_CHECK(options.add_special_tokens,
                  "--encoder frames each document with the tokenizer's template; drop --no-special-tokens");
    TRIDENT_CHECK(template_tokens > 0,
                  "--encoder: the tokenizer's post-processor adds no tokens around a sequence; expected a "
                  "single-sequence template such as BERT's [CLS] $A [SEP] (a WordPiece vocab.txt or a tokenizer.json "
                  "with a TemplateProcessing or BertProcessing post-processor)");
  }
  std::optional<std::int32_t> eod;
  if (options.append_eod) {
    if (options.eod_token) {
      eod = tokenizer.token_to_id(*options.eod_token);
      TRIDENT_CHECK(eod.has_value(), "--eod-token '{}' is not in the tokenizer's vocabulary", *options.eod_token);
    } else {
      eod = tokenizer.eod_id();
      TRIDENT_CHECK(eod.has_value(), "--append-eod: the tokenizer has none of {}; name the token with --eod-token",
                    end_of_document_names_text());
    }
  }
  const int workers = options.workers > 0 ? options.workers
                                          : num_threads();
  // The output's directory, made here so that an error names it (not a temporary file inside it).
  if (const std::filesystem::path dir = std::filesystem::path(options.output_prefix).parent_path(); !dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    TRIDENT_CHECK(!ec, "--output-prefix '{}': cannot create the directory '{}': {}", options.output_prefix,
                  dir.string(), ec.message());
    TRIDENT_CHECK(std::filesystem::is_directory(dir), "--output-prefix '{}': '{}' is not a directory",
                  options.output_prefix, dir.string());
    TRIDENT_CHECK(::access(dir.c_str(), W_OK) == 0, "--output-prefix '{}': cannot write in the directory '{}': {}",
                  options.output_prefix, dir.string(), std::strerror(errno));
  }
  const std::string bin = options.output_prefix + ".bin", idx = options.output_prefix + ".idx";
  for (const std::string& target : {bin, idx}) {
    for (const std::filesystem::path& p : remove_stale_temporaries(target))
      if (stale) stale->push_back(p);
  }
  TRIDENT_CHECK(options.overwrite || (!std::filesystem::exists(bin) && !std::filesystem::exists(idx)),
                "--output-prefix '{}': {} already exists; give --overwrite to replace the dataset, or another prefix",
                options.output_prefix, std::filesystem::exists(bin) ? bin : idx);
  const auto stopped = [&] {
    TRIDENT_CHECK(!options.stop || !options.stop->load(std::memory_order_relaxed),
                  "interrupted: {}.bin/.idx not written (the temporary files are removed)", options.output_prefix);
  };
  std::optional<DocumentReader> reader;  // none: the documents come from options.documents
  if (!options.documents) reader.emplace(options.inputs, options.format, options.json_key);
  std::uint64_t given_bytes = 0;  // options.documents' text so far
  const auto bytes_read = [&] { return reader ? reader->bytes_read() : given_bytes; };
  PreprocessSummary summary;
  summary.dtype = best_fitting_dtype(tokenizer.vocab_size());
  summary.workers = workers;
  IndexedDatasetBuilder builder(options.output_prefix, summary.dtype);

  std::atomic<std::uint64_t> docs_written{0}, tokens_written{0};  // for progress reports
  Pipeline pipe(static_cast<std::size_t>(workers) * 2 + 2);
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      try {
        Encoder enc(tokenizer);
        while (auto b = pipe.take()) {
          b->tokens.clear();
          b->lengths.clear();
          for (RawDocument& doc : b->docs) {
            const InputFormat format = reader ? reader->format_of(doc.file_index) : InputFormat::text;
            std::string text;
            try {
              text = extract_document_text(doc, format, options.json_key,
                                           reader ? reader->file(doc.file_index) : std::filesystem::path());
            } catch (const Error&) {
              if (!options.skip_bad_lines) throw;
              b->lengths.push_back(-1);
              continue;
            }
            const std::size_t before = b->tokens.size();
            enc.encode(text, b->tokens, options.add_special_tokens);
            // Encoder mode: the template alone means the document has no tokens; skip it.
            if (options.encoder && b->tokens.size() - before == template_tokens) b->tokens.resize(before);
            if (eod && b->tokens.size() > before) b->tokens.push_back(*eod);
            b->lengths.push_back(static_cast<std::int64_t>(b->tokens.size() - before));
          }
          b->docs.clear();
          b->docs.shrink_to_fit();
          pipe.done(std::move(b));
        }
      } catch (...) {
        pipe.fail(std::current_exception());
      }
    });
  }
  std::thread writer([&] {
    try {
      for (std::uint64_t seq = 0;; ++seq) {
        auto b = pipe.next_ready(seq);
        if (!b) break;
        std::size_t offset = 0;
        for (std::int64_t len : b->lengths) {
          if (len < 0) {
            ++summary.bad_lines;
          } else if (len == 0) {
            ++summary.empty_documents;
          } else {
            builder.add_document(std::span<const std::int32_t>(b->tokens.data() + offset, static_cast<std::size_t>(len)));
            offset += static_cast<std::size_t>(len);
          }
        }
        docs_written.store(builder.documents(), std::memory_order_relaxed);
        tokens_written.store(builder.tokens(), std::memory_order_relaxed);
        pipe.written();
      }
    } catch (...) {
      pipe.fail(std::current_exception());
    }
  });

  // Reader (this thread).
  try {
    auto last_report = std::chrono::steady_clock::now();
    std::uint64_t seq = 0;
    auto batch = std::make_unique<Batch>();
    std::size_t batch_bytes = 0;
    RawDocument doc;
    bool more = true;
    while (more) {
      stopped();
      more = reader ? reader->next(doc) : options.documents(doc.content);
      if (more && !reader) given_bytes += doc.content.size();
      if (more) {
        batch_bytes += doc.content.size();
        batch->docs.push_back(std::move(doc));
        doc = RawDocument{};
      }
      if ((!more && !batch->docs.empty()) || batch_bytes >= kBatchBytes || batch->docs.size() >= kBatchDocs) {
        batch->seq = seq++;
        if (!pipe.push(std::move(batch))) break;
        batch = std::make_unique<Batch>();
        batch_bytes = 0;
      }
      if (progress && std::chrono::steady_clock::now() - last_report > std::chrono::seconds(1)) {
        last_report = std::chrono::steady_clock::now();
        progress({bytes_read(), reader ? reader->total_bytes() : 0, docs_written.load(std::memory_order_relaxed),
                  tokens_written.load(std::memory_order_relaxed), elapsed()});
      }
    }
  } catch (...) {
    pipe.fail(std::current_exception());
  }
  pipe.close_input();
  for (auto& t : pool) t.join();
  writer.join();
  if (auto e = pipe.error()) std::rethrow_exception(e);
  stopped();
  // A dataset of no documents is refused by training anyway: say so now, and write nothing (the
  // builder's destructor removes its temporary file).
  if (builder.documents() == 0) {
    std::string inputs = reader ? "" : "the documents given";
    for (const auto& f : options.inputs) inputs += fmt::format("{}'{}'", inputs.empty() ? "" : ", ", f.string());
    const std::string nulls = reader && reader->null_rows() ? fmt::format(", {} null rows", reader->null_rows()) : "";
    TRIDENT_FAIL("{}: no documents to write ({} empty documents{} and {} bad lines skipped); {}.bin/.idx not written",
                 inputs, summary.empty_documents, nulls, summary.bad_lines, options.output_prefix);
  }
  builder.finalize();
  summary.documents = builder.documents();
  summary.tokens = builder.tokens();
  // After the dataset: a card left by an earlier dataset of the prefix (a crash between the two) names other
  // counts than the .idx, which training refuses.
  write_dataset_card(options.output_prefix,
                     DatasetCard{options.encoder, eod.has_value(), options.add_special_tokens, options.tokenizer_source,
                                 tokenizer.vocab_size(), tokenizer_fingerprint(tokenizer), summary.documents,
                                 summary.tokens});
  summary.input_bytes = bytes_read();
  summary.null_rows = reader ? reader->null_rows() : 0;
  summary.seconds = elapsed();
  if (progress) {
    progress({bytes_read(), reader ? reader->total_bytes() : bytes_read(), summary.documents, summary.tokens,
              summary.seconds});
  }
  return summary;
}

}  // namespace trident::data
