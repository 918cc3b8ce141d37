// Opening the run's datasets and tokenizer (train/setup.h).
#include "trident/train/setup.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>

#include "trident/data/dataset/blended_dataset.h"
#include "trident/data/dataset/dataset_card.h"
#include "trident/data/dataset/document_dataset.h"
#include "trident/data/dataset/gpt_dataset.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/split.h"
#include "trident/core/atomic_file.h"
#include "trident/models/hf.h"
#include "trident/optim/schedule.h"
#include "trident/parallel/pipeline/schedule.h"
#include "trident/train/trainer.h"

namespace trident::train {

namespace fs = std::filesystem;

namespace detail {

namespace {

fs::path cache_dir_of(const Config& c, const data::IndexedDataset& ds) {
  return c.data.cache_dir.empty() ? fs::path(ds.prefix()).parent_path() / "index-cache" : fs::path(c.data.cache_dir);
}

// Tokens in documents (sequences, as Megatron splits them) [r.begin, r.end) of `ds`.
std::int64_t tokens_in(const data::IndexedDataset& ds, data::DocumentRange r) {
  const auto lengths =
      ds.sequence_lengths().subspan(static_cast<std::size_t>(r.begin), static_cast<std::size_t>(r.size()));
  return std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
}

// The samples of one epoch of documents `r` of `ds`: one per document unpacked; packed, the windows
// GptDataset cuts (seq_len + 1 tokens sharing one for the next token, seq_len apart for a masked LM).
std::int64_t samples_in(const Config& c, const data::IndexedDataset& ds, data::DocumentRange r,
                        models::Objective objective) {
  if (!c.data.packing) return r.size();
  const std::int64_t extra = objective == models::Objective::next_token ? 1 : 0;
  const std::int64_t tokens = tokens_in(ds, r);
  return tokens > extra ? (tokens - extra) / c.train.seq_len : 0;
}

// How samples are cut from documents: packed windows, or one padded document each.
struct Framing {
  models::Objective objective = models::Objective::next_token;
  std::int32_t pad_id = 0;
  std::int64_t keep_last = 0;
};

// One dataset's documents for one split, and its weight in that split's blend.
struct Part {
  std::shared_ptr<const data::IndexedDataset> dataset;
  data::DocumentRange documents;
  double weight = 0;
  std::string origin;  // for errors: which key chose these documents
};

// The sample stream of one split: a single dataset as it is (one epoch after
// another), or several blended by weight into `samples` samples, each built
// with its share of them (Megatron's 0.5% margin) so the blend never runs
// past a dataset's end.
std::shared_ptr<const data::SampleSource> sample_stream(const Config& c, const std::vector<Part>& parts,
                                                        std::int64_t samples, std::string_view split,
                                                        const Framing& framing) {
  double total = 0;
  for (const Part& p : parts) total += p.weight;
  std::vector<std::shared_ptr<const data::SampleSource>> sources;
  std::vector<double> weights;
  const bool next_token = framing.objective == models::Objective::next_token;
  for (const Part& p : parts) {
    const std::int64_t num_samples =
        parts.size() > 1
            ? static_cast<std::int64_t>(std::ceil(p.weight / total * static_cast<double>(samples) * 1.005)) + 1
            : 0;
    try {
      if (!c.data.packing) {
        data::DocumentDatasetConfig d;
        d.sample_tokens = c.train.seq_len + (next_token ? 1 : 0);
        d.pad_id = framing.pad_id;
        d.keep_last = framing.keep_last;
        d.num_samples = num_samples;
        d.seed = static_cast<std::uint64_t>(c.train.seed);
        d.documents = p.documents;
        sources.push_back(std::make_shared<data::DocumentDataset>(p.dataset, d));
      } else {
        data::GptDatasetConfig g;
        g.seq_len = c.train.seq_len;
        g.seed = static_cast<std::uint64_t>(c.train.seed);
        g.cache_dir = cache_dir_of(c, *p.dataset);
        g.documents = p.documents;
        g.add_extra_token = next_token;
        g.num_samples = num_samples;
        sources.push_back(std::make_shared<data::GptDataset>(p.dataset, g));
      }
    } catch (const Error& e) {
      TRIDENT_FAIL("{} data ({}): {}", split, p.origin, e.message());
    }
    weights.push_back(p.weight);
  }
  if (sources.size() == 1) return sources[0];
  return std::make_shared<data::BlendedDataset>(std::move(sources), std::move(weights), samples);
}

// The token ids of `ds`, from the cache (keyed by the .idx hash and the .bin's size and time) or a scan.
data::IndexedDataset::TokenRange token_range(const Config& c, const data::IndexedDataset& ds) {
  std::error_code ec;
  const fs::path bin = ds.prefix() + ".bin";
  const auto mtime = fs::last_write_time(bin, ec).time_since_epoch().count();
  const std::string key = fmt::format("{} {} {}", ds.index_hash(), ds.bin_bytes(), ec ? 0 : mtime);
  const fs::path cache = cache_dir_of(c, ds) / fmt::format("{}-{:016x}.token_range",
                                                          fs::path(ds.prefix()).filename().string(), ds.index_hash());
  {
    std::ifstream in(cache);
    std::string k1, k2, k3;
    data::IndexedDataset::TokenRange r;
    if (in >> k1 >> k2 >> k3 >> r.min >> r.max && fmt::format("{} {} {}", k1, k2, k3) == key) return r;
  }
  const data::IndexedDataset::TokenRange r = ds.token_range();
  try {  // a cache that cannot be written costs the next run a scan, nothing else
    fs::create_directories(cache.parent_path());
    write_file_atomically(cache, fmt::format("{} {} {}\n", key, r.min, r.max));
  } catch (const std::exception&) {
  }
  return r;
}

void check_token_ids(const Config& c, const data::IndexedDataset& ds, const data::Tokenizer& tokenizer,
                     std::string_view key) {
  const data::IndexedDataset::TokenRange r = token_range(c, ds);
  if (r.max < r.min) return;  // no tokens
  const std::int64_t vocab = tokenizer.vocab_size();
  TRIDENT_CHECK(r.min >= 0, "{}: dataset '{}.bin' holds token id {}, which is no token id (they are 0 or more)", key,
                ds.prefix(), r.min);
  TRIDENT_CHECK(r.max < vocab,
                "{}: dataset '{}.bin' holds token id {}, but data.tokenizer '{}' has {} tokens (ids up to {}): the "
                "dataset was made with another tokenizer; preprocess it with this one, or give the one it was made "
                "with",
                key, ds.prefix(), r.max, c.data.tokenizer, vocab, vocab - 1);
}

// What the dataset's card (data/dataset/dataset_card.h) says it holds must fit the model and the tokenizer:
// documents framed for a masked LM for an encoder and not for a causal model, and the ids of data.tokenizer's
// vocabulary. A dataset without a card (made by another tool) is not checked.
void check_card(const Config& c, const data::IndexedDataset& ds, const data::Tokenizer& tokenizer,
                std::string_view key, models::Objective objective) {
  const std::optional<data::DatasetCard> card = data::read_dataset_card(ds.prefix());
  if (!card) return;
  const std::string path = data::dataset_card_path(ds.prefix());
  const auto tokens = static_cast<std::uint64_t>(ds.total_tokens());
  TRIDENT_CHECK(card->documents == ds.size() && card->tokens == tokens,
                "{}: '{}' describes another dataset ({} documents, {} tokens) than '{}.idx' ({} documents, {} tokens): "
                "preprocess the dataset again, or delete the card to train without its checks",
                key, path, card->documents, card->tokens, ds.prefix(), ds.size(), tokens);
  const bool encoder = objective == models::Objective::masked_lm;
  TRIDENT_CHECK(card->encoder || !encoder,
                "{}: dataset '{}' was preprocessed without --encoder, so its documents are not framed [CLS] ... [SEP] "
                "as a masked-LM model learns them ('{}'): preprocess it again with --encoder",
                key, ds.prefix(), path);
  TRIDENT_CHECK(!card->encoder || encoder,
                "{}: dataset '{}' was preprocessed with --encoder (documents framed [CLS] ... [SEP] for a masked-LM "
                "model, '{}'), but model.arch '{}' predicts the next token: preprocess it again without --encoder",
                key, ds.prefix(), path, c.model.arch);
  const std::string fingerprint = data::tokenizer_fingerprint(tokenizer);
  TRIDENT_CHECK(card->tokenizer_fingerprint == fingerprint,
                "{}: dataset '{}' was made with the tokenizer '{}' ({} tokens, fingerprint {}), not data.tokenizer "
                "'{}' ({} tokens, fingerprint {}): its ids would be read as other tokens; give the tokenizer it was "
                "made with, or preprocess it again with this one ('{}')",
                key, ds.prefix(), card->tokenizer, card->vocab_size, card->tokenizer_fingerprint, c.data.tokenizer,
                tokenizer.vocab_size(), fingerprint, path);
}

}  // namespace

std::int64_t epoch_samples(const Config& c, models::Objective objective) {
  std::int64_t samples = 0;
  for (const auto& path : c.data.paths) {
    auto ds = data::IndexedDataset::open(path);
    if (ds->size() == 0) continue;  // open_data names an empty dataset
    const auto ranges = data::parse_split(c.data.split, static_cast<std::int64_t>(ds->size()));
    samples += samples_in(c, *ds, ranges[0], objective);
  }
  return samples;
}

std::string resolve_epochs(Config& c, int world_size) {
  if (!c.train.epochs) return "";
  validate_layout(c, world_size);
  check_data_paths(c);
  const std::int64_t tp = c.dist.tensor_parallel_size, pp = c.dist.pipeline_parallel_size;
  const auto dp = static_cast<int>(c.dist.data_parallel_size ? c.dist.data_parallel_size : world_size / (tp * pp));
  const std::int64_t global_batch = c.train.micro_batch_size * accumulation_steps(c, dp) * dp;
  const std::int64_t epoch = epoch_samples(c, configured_objective(c));
  const double epochs = *c.train.epochs;
  const double samples = std::floor(epochs * static_cast<double>(epoch));
  const double steps = std::floor(samples / static_cast<double>(global_batch));
  TRIDENT_CHECK(steps >= 1,
                "train.epochs={} over the training set's {} samples per epoch ({}; data.split '{}') is {} samples, "
                "less than one global batch of {}: raise train.epochs or lower the batch",
                epochs, epoch,
                c.data.packing ? fmt::format("windows of train.seq_len={}", c.train.seq_len)
                               : std::string("one per document, data.packing = false"),
                c.data.split, static_cast<std::int64_t>(samples), global_batch);
  TRIDENT_CHECK(steps < 1e15, "train.epochs={} × {} samples per epoch is too many steps to count", epochs, epoch);
  c.train.steps = static_cast<std::int64_t>(steps);
  const auto left = static_cast<std::int64_t>(samples) - c.train.steps * global_batch;
  return fmt::format("train.epochs={}: {} steps = ⌊{} × {} samples per epoch / global batch {}⌋{}", epochs,
                     c.train.steps, epochs, epoch, global_batch,
                     left > 0 ? fmt::format(" (the last {} samples of the last epoch are not trained)", left) : "");
}

DataSources open_data(const Config& c, std::int64_t train_samples, std::int64_t valid_samples) {
  return open_data(c, data::Tokenizer::load(c.data.tokenizer), train_samples, valid_samples);
}

DataSources open_data(const Config& c, data::Tokenizer tokenizer, std::int64_t train_samples,
                      std::int64_t valid_samples, models::Objective objective) {
  DataSources d;
  d.tokenizer = std::move(tokenizer);
  Framing framing{objective};
  if (!c.data.packing) {
    const std::optional<std::int32_t> pad = data::padding_id(d.tokenizer);
    TRIDENT_CHECK(pad.has_value(),
                  "data.packing = false pads each document to train.seq_len, and data.tokenizer '{}' has neither a pad "
                  "token ({}) nor an end-of-document token ({}) to pad with",
                  c.data.tokenizer, fmt::join(data::padding_names(), ", "), data::end_of_document_names_text());
    framing.pad_id = *pad;
    // An encoder's documents end with the template's closing tokens ([SEP]), which a cut keeps.
    if (objective == models::Objective::masked_lm)
      framing.keep_last = static_cast<std::int64_t>(d.tokenizer.parts().suffix_ids.size());
  }
  // Without data.weights a blend draws from each dataset in proportion to its
  // tokens in the split (not to the samples built for the blend, which would
  // make every dataset as large as the whole run).
  std::vector<Part> train, valid;
  for (std::size_t i = 0; i < c.data.paths.size(); ++i) {
    auto ds = data::IndexedDataset::open(c.data.paths[i]);
    TRIDENT_CHECK(ds->size() > 0, "data.paths: dataset '{}' is empty (0 documents)", c.data.paths[i]);
    check_token_ids(c, *ds, d.tokenizer, "data.paths");
    check_card(c, *ds, d.tokenizer, "data.paths", objective);
    const auto ranges = data::parse_split(c.data.split, static_cast<std::int64_t>(ds->size()));
    TRIDENT_CHECK(ranges[0].size() > 0, "data.split '{}' leaves no training documents in '{}'", c.data.split,
                  c.data.paths[i]);
    // Unpacked, a dataset's share is its documents (its samples), not its tokens.
    auto weight = [&](data::DocumentRange r) {
      if (!c.data.weights.empty()) return c.data.weights[i];
      return static_cast<double>(c.data.packing ? tokens_in(*ds, r) : r.size());
    };
    auto origin = [&](data::DocumentRange r) {
      return fmt::format("documents [{}, {}) by data.split '{}'", r.begin, r.end, c.data.split);
    };
    train.push_back({ds, ranges[0], weight(ranges[0]), origin(ranges[0])});
    if (ranges[1].size() > 0) valid.push_back({ds, ranges[1], weight(ranges[1]), origin(ranges[1])});
  }
  if (!c.data.valid_paths.empty()) {
    valid.clear();
    for (const auto& path : c.data.valid_paths) {
      auto ds = data::IndexedDataset::open(path);
      TRIDENT_CHECK(ds->size() > 0, "data.valid_paths: dataset '{}' is empty (0 documents)", path);
      check_token_ids(c, *ds, d.tokenizer, "data.valid_paths");
      check_card(c, *ds, d.tokenizer, "data.valid_paths", objective);
      const data::DocumentRange all{0, static_cast<std::int64_t>(ds->size())};
      valid.push_back({ds, all, static_cast<double>(c.data.packing ? tokens_in(*ds, all) : all.size()),
                       "data.valid_paths"});
    }
  }
  d.train = sample_stream(c, train, train_samples, "train", framing);
  if (!valid.empty() && c.train.eval_interval > 0) {
    d.valid = sample_stream(c, valid, valid_samples, "validation", framing);
  }
  return d;
}

}  // namespace detail

}  // namespace trident::train
