#include "trident/data/dataset/loader.h"

#include <algorithm>

#include "trident/core/error.h"
#include "trident/core/rng.h"
#include "trident/data/dataset/shuffle.h"

namespace trident::data {

EpochOrder::EpochOrder(std::int64_t source_size, std::uint64_t seed) : n_(source_size), seed_(seed) {
  TRIDENT_CHECK(n_ > 0, "the data source has no samples");
}

std::int64_t EpochOrder::operator()(std::int64_t k) {
  TRIDENT_CHECK(k >= 0, "negative sample index {}", k);
  const std::int64_t epoch = k / n_, pos = k % n_;
  if (epoch == 0) return pos;
  if (epoch != cached_epoch_) {
    perm_ = random_permutation(n_, CounterRng(seed_, "data/loader/epoch").derive(std::to_string(epoch)));
    cached_epoch_ = epoch;
  }
  return perm_[static_cast<std::size_t>(pos)];
}

std::vector<std::int64_t> micro_batch_sample_ids(std::int64_t consumed_samples, std::int64_t micro_batch_size,
                                                 int dp_rank, int dp_size) {
  TRIDENT_CHECK(micro_batch_size > 0, "micro_batch_size {} must be positive", micro_batch_size);
  TRIDENT_CHECK(dp_size > 0 && 0 <= dp_rank && dp_rank < dp_size, "dp_rank {} is not in [0, dp_size = {})", dp_rank,
                dp_size);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(micro_batch_size));
  const std::int64_t first = consumed_samples + dp_rank * micro_batch_size;
  for (std::int64_t i = 0; i < micro_batch_size; ++i) ids[static_cast<std::size_t>(i)] = first + i;
  return ids;
}

std::int64_t trained_labels(const SampleSource& source, EpochOrder& order, std::int64_t first, std::int64_t count,
                            std::int64_t masked_input_token) {
  const std::int64_t t = source.sample_tokens(), s = t - 1;
  const bool padded = source.padded();
  if (masked_input_token < 0 && !padded) return count * s;
  std::vector<std::int32_t> buf(static_cast<std::size_t>(t));
  std::int64_t trained = 0;
  for (std::int64_t k = first; k < first + count; ++k) {
    const std::int64_t j = order(k);
    // Labels [0, n − 1) have a real target: a padded sample's real tokens end at n.
    const std::int64_t labels = std::max<std::int64_t>((padded ? source.length(j) : t) - 1, 0);
    trained += labels;
    if (masked_input_token < 0) continue;
    source.sample(j, buf.data());
    trained -= std::count(buf.begin(), buf.begin() + labels, masked_input_token);
  }
  return trained;
}

std::int64_t trained_labels(const SampleSource& source, EpochOrder& order, std::int64_t first, std::int64_t count,
                            const MaskingOptions& masking) {
  std::vector<std::int32_t> buf(static_cast<std::size_t>(source.sample_tokens()));
  std::int64_t trained = 0;
  for (std::int64_t k = first; k < first + count; ++k) {
    const std::int64_t j = order(k);
    source.sample(j, buf.data());
    trained += count_masked(masking, k, buf, source.length(j));
  }
  return trained;
}

std::int64_t trained_labels(const SampleSource& source, EpochOrder& order, std::int64_t first, std::int64_t count,
                            const LoaderOptions& options) {
  if (options.masking) return trained_labels(source, order, first, count, *options.masking);
  return trained_labels(source, order, first, count, options.masked_input_token);
}

std::int64_t real_tokens(const SampleSource& source, EpochOrder& order, std::int64_t first, std::int64_t count,
                         const LoaderOptions& options) {
  const std::int64_t inputs = options.masking ? source.sample_tokens() : source.sample_tokens() - 1;
  if (!source.padded()) return count * inputs;
  std::int64_t real = 0;
  for (std::int64_t k = first; k < first + count; ++k) real += std::min(source.length(order(k)), inputs);
  return real;
}

DataLoader::DataLoader(std::shared_ptr<const SampleSource> source, LoaderOptions options)
    : source_(std::move(source)),
      options_(options),
      consumed_(options.consumed_samples),
      order_(source_ ? source_->size() : 0, options.seed) {
  // Validates micro_batch_size and dp first: the modulo below divides by their product.
  micro_batch_sample_ids(0, options_.micro_batch_size, options_.dp_rank, options_.dp_size);
  const std::int64_t global = options_.micro_batch_size * options_.dp_size;
  TRIDENT_CHECK(options_.consumed_samples >= 0 && options_.consumed_samples % global == 0,
                "consumed_samples {} is not a multiple of the global micro-batch {} (micro_batch_size {} x dp {})",
                options_.consumed_samples, global, options_.micro_batch_size, options_.dp_size);
  if (options_.masking) {
    check_masking_options(*options_.masking);
    TRIDENT_CHECK(options_.masked_input_token < 0,
                  "LoaderOptions: masked_input_token {} (causal LM's end-of-document loss mask) and masking (masked "
                  "LM) exclude each other",
                  options_.masked_input_token);
  }
  if (options_.prefetch > 0) thread_ = std::thread([this] { run(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Batch DataLoader::make(std::int64_t consumed, EpochOrder& order) const {
  const std::int64_t b = options_.micro_batch_size, t = source_->sample_tokens();
  const std::int64_t s = options_.masking ? t : t - 1;
  Batch batch;
  batch.sample_ids = micro_batch_sample_ids(consumed, b, options_.dp_rank, options_.dp_size);
  batch.consumed_samples = consumed + b * options_.dp_size;
  batch.tokens = Tensor::empty(Shape{b, s}, DType::i64);
  batch.labels = Tensor::empty(Shape{b, s}, DType::i64);
  const bool padded = source_->padded();
  if (padded) batch.key_mask = Tensor::empty(Shape{b, s}, DType::u8);
  const bool documents = options_.document_end_token >= 0 && !options_.masking;
  if (documents) batch.document_starts = Tensor::empty(Shape{b, s}, DType::i32);
  auto* tok = batch.tokens.data<std::int64_t>();
  auto* lab = batch.labels.data<std::int64_t>();
  std::vector<std::int32_t> buf(static_cast<std::size_t>(t));
  for (std::int64_t r = 0; r < b; ++r) {
    const std::int64_t sample_id = batch.sample_ids[static_cast<std::size_t>(r)];
    const std::int64_t j = order(sample_id);
    source_->sample(j, buf.data());
    const std::int64_t n = padded ? source_->length(j) : t;  // real tokens: [0, n)
    if (padded) {
      auto* mask = batch.key_mask.data<std::uint8_t>() + r * s;
      for (std::int64_t k = 0; k < s; ++k) mask[k] = k < n ? 1 : 0;
    }
    if (options_.masking) {
      const auto row = static_cast<std::size_t>(r * s), size = static_cast<std::size_t>(s);
      mask_sample(*options_.masking, sample_id, buf, std::span(tok + row, size), std::span(lab + row, size), n);
      continue;
    }
    if (documents) {
      // A document runs to its end-of-document token, inclusive; the next input token opens the next one.
      auto* starts = batch.document_starts.data<std::int32_t>() + r * s;
      std::int32_t start = 0;
      for (std::int64_t k = 0; k < s; ++k) {
        starts[k] = start;
        if (buf[static_cast<std::size_t>(k)] == options_.document_end_token) start = static_cast<std::int32_t>(k + 1);
      }
    }
    for (std::int64_t k = 0; k < s; ++k) {
      const std::int32_t input = buf[static_cast<std::size_t>(k)];
      tok[r * s + k] = input;
      const bool ignored = input == options_.masked_input_token || k + 1 >= n;  // no real target after the end
      lab[r * s + k] = ignored ? kIgnoreLabel : buf[static_cast<std::size_t>(k + 1)];
    }
  }
  return batch;
}

void DataLoader::run() {
  try {
    EpochOrder order(source_->size(), options_.seed);
    std::int64_t consumed = options_.consumed_samples;
    while (true) {
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return stop_ || ready_.size() < static_cast<std::size_t>(options_.prefetch); });
        if (stop_) return;
      }
      Batch b = make(consumed, order);
      consumed = b.consumed_samples;
      {
        std::lock_guard lock(m_);
        ready_.push_back(std::move(b));
      }
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard lock(m_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

Batch DataLoader::next() {
  if (options_.prefetch <= 0) {
    Batch b = make(consumed_, order_);
    consumed_ = b.consumed_samples;
    return b;
  }
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return !ready_.empty() || error_; });
  if (ready_.empty() && error_) std::rethrow_exception(error_);
  Batch b = std::move(ready_.front());
  ready_.pop_front();
  lock.unlock();
  cv_.notify_all();
  consumed_ = b.consumed_samples;
  return b;
}

}  // namespace trident::data
