// Feeding samples to training: distributed slicing, endless epochs,
// background prefetch, exact resume (Megatron's MegatronPretrainingSampler,
// oslo's DistributedProxySampler and InfiniteDataLoader).
//
// Global sample order: global sample k is sample order(k) of the source,
// where with N = source size, epoch e = k / N reads the source in its own
// (already shuffled) order for e = 0 and through a fresh seeded permutation
// for every later epoch. So the stream never ends, and it is a pure function
// of (source, seed).
//
// Global batch semantics (docs/numerics.md#global-batch-semantics-and-the-loss): a global micro-batch is the next
// micro_batch_size * dp_size samples of that stream; data-parallel rank d
// takes its contiguous slice [d * micro_batch_size, (d + 1) * micro_batch_size).
// The union over ranks is the same samples whatever dp_size is, and resuming
// at consumed_samples = N continues exactly where the stream was after N.
//
// Loss masking (Megatron's --eod-mask-loss): with masked_input_token set to the
// end-of-document id, a position whose input token is that id gets the ignore
// label (-100), so no position learns to predict a document's first token from
// the previous document's end. trained_labels() counts the labels that remain
// in any run of the stream, so every rank can divide a step's loss sum by the
// same global count before any backward pass.
//
// Padded samples (one document per sample, DocumentDataset): the real tokens of a sample are its first
// SampleSource::length(); the batch's key_mask marks them, the labels whose target is padding are
// ignored (as are all of a masked-LM sample's padding positions, which masking never selects), and
// trained_labels() counts only real targets, so the loss is the mean over the global batch's real tokens.
//
// Masked LM (BERT): with `masking` set, a sample is the model's input as it is
// (no shift: a sample of T tokens gives T inputs and T labels, so use samples
// of exactly seq_len tokens, GptDatasetConfig::add_extra_token = false), masked
// by mask_sample (masked_lm.h) at its global sample index: tokens are the
// masked inputs, labels the original ids at the selected positions and
// kIgnoreLabel elsewhere. trained_labels() then counts the selected positions,
// so the loss is the mean over the global batch's masked tokens. The masks
// depend only on (masking.seed, global sample index, position), never on the
// data-parallel size, rank or micro-batch size.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "trident/core/tensor.h"
#include "trident/data/dataset/masked_lm.h"
#include "trident/data/dataset/sample_source.h"

namespace trident::data {

// Which source sample global sample k is (see above). Thread-compatible:
// caches the permutation of the last epoch asked for.
class EpochOrder {
 public:
  EpochOrder(std::int64_t source_size, std::uint64_t seed);
  std::int64_t operator()(std::int64_t k);

 private:
  std::int64_t n_;
  std::uint64_t seed_;
  std::int64_t cached_epoch_ = -1;
  std::vector<std::int64_t> perm_;
};

// The global sample indices rank dp_rank reads for the micro-batch that starts
// after `consumed_samples` global samples.
std::vector<std::int64_t> micro_batch_sample_ids(std::int64_t consumed_samples, std::int64_t micro_batch_size,
                                                 int dp_rank, int dp_size);

struct LoaderOptions {
  std::int64_t micro_batch_size = 1;
  int dp_rank = 0;
  int dp_size = 1;
  std::int64_t consumed_samples = 0;     // resume position (global samples, all ranks)
  std::uint64_t seed = 1234;             // for the permutations of epochs >= 1
  int prefetch = 4;                      // micro-batches prepared ahead (0: none, synchronous)
  std::int64_t masked_input_token = -1;  // >= 0: labels after this input token are ignored (see above)
  // >= 0: the end-of-document id by which Batch::document_starts splits each sample into its documents
  // (causal LM; Megatron's reset_attention_mask / reset_position_ids): a document ends with this token.
  std::int64_t document_end_token = -1;
  std::optional<MaskingOptions> masking = std::nullopt;  // masked LM (see above); excludes masked_input_token
};

inline constexpr std::int64_t kIgnoreLabel = -100;  // the loss's ignore_index

// The labels that are not ignored in global samples [first, first + count) of the stream of `source`
// (epochs ordered by `order`, made with the loader's seed; keep it between calls, as a later epoch's
// permutation is built once), masked as LoaderOptions::masked_input_token says (−1: none).
std::int64_t trained_labels(const SampleSource& source, EpochOrder& order, std::int64_t first, std::int64_t count,
                            std::int64_t masked_input_token);
// Masked LM: the positions masking selects in global samples [first, first + count) (every sample masked
// at its global index, as the loader masks it).
std::int64_t trained_labels(const SampleSource& source, EpochOrder& order, std::int64_t first, std::int64_t count,
                            const MaskingOptions& masking);
// The rule `options` set: masking when it has a value, else masked_input_token.
std::int64_t trained_labels(const SampleSource& source, EpochOrder& order, std::int64_t first, std::int64_t count,
                            const LoaderOptions& options);
// The real (not padding) input tokens of global samples [first, first + count): the ones of the batches'
// key masks, what tokens/s counts. Every input of a packed source is real.
std::int64_t real_tokens(const SampleSource& source, EpochOrder& order, std::int64_t first, std::int64_t count,
                         const LoaderOptions& options);

struct Batch {
  // Causal LM: i64 [micro_batch_size, seq_len], sample[0, seq_len). Masked LM: i64
  // [micro_batch_size, sample_tokens()], the masked sample.
  Tensor tokens;
  // Causal LM: sample[1, seq_len], or kIgnoreLabel where masked. Masked LM: the original id at the
  // selected positions, kIgnoreLabel elsewhere.
  Tensor labels;
  // A padded source's (SampleSource::padded): u8 [micro_batch_size, inputs], 1 at a real input token, 0 at
  // padding (Hugging Face's attention_mask; nn::ForwardContext::key_mask). Undefined for a packed source.
  Tensor key_mask;
  // With LoaderOptions::document_end_token: i32 [micro_batch_size, inputs], the index of the first input
  // token of each input token's document (ops::AttentionOptions::document_starts). Undefined otherwise.
  Tensor document_starts;
  std::vector<std::int64_t> sample_ids;  // the global sample indices in it
  std::int64_t consumed_samples = 0;     // global samples consumed after this batch
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const SampleSource> source, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next micro-batch for this rank. Rethrows an error of the prefetch thread.
  Batch next();
  // Global samples consumed after the last batch next() returned (checkpoint this).
  std::int64_t consumed_samples() const noexcept { return consumed_; }

 private:
  Batch make(std::int64_t consumed, EpochOrder& order) const;
  void run();

  std::shared_ptr<const SampleSource> source_;
  LoaderOptions options_;
  std::int64_t consumed_;
  EpochOrder order_;  // synchronous mode only
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace trident::data
