// The data pipeline alone, as oslo's DatasetPreprocessor → DatasetBlender → DistributedProxySampler →
// InfiniteDataLoader: two corpora are tokenized into Megatron's indexed format, cut into GPT samples,
// blended 0.7 / 0.3, and read forever by every data-parallel rank, each its own slice of each global batch.
//
//   mpirun -n 2 ./data_pipeline WORK_DIR [STEPS]       (also runs as one process)
//
// It checks the three promises a training loop relies on: the blend follows its weights, the ranks'
// slices of a global batch are disjoint (no sample reaches two ranks, nor comes twice in a pass) and
// together are exactly the batch one process would read, and the stream goes on past the end of the
// blend (a new epoch in a fresh order).
#include <fmt/format.h>
#include <trident/trident.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace trident;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kSeqLen = 16, kMicroBatch = 4, kBlendSize = 1000;

// A corpus of `docs` lines drawn from `letters` only, so a sample's text tells which corpus it came from.
void write_corpus(const fs::path& path, const std::string& letters, int docs, std::uint64_t seed) {
  const CounterRng rng(seed, "corpus");
  std::ofstream out(path);
  std::uint64_t draw = 0;
  for (int d = 0; d < docs; ++d) {
    for (int w = 0; w < 12; ++w) {
      const int length = 2 + static_cast<int>(rng.uniform(draw++) * 5);
      for (int c = 0; c < length; ++c)
        out << letters[static_cast<std::size_t>(rng.uniform(draw++) * static_cast<double>(letters.size()))];
      out << (w + 1 < 12 ? ' ' : '\n');
    }
  }
}

// Rank 0 writes both corpora, trains a byte-level BPE tokenizer on them and preprocesses each into
// WORK_DIR/{a,b}.{bin,idx}, as `trident tokenizer train` and `trident preprocess` would.
void prepare(const fs::path& work) {
  fs::create_directories(work);
  write_corpus(work / "a.txt", "abcdefghijklm", 400, 1);
  write_corpus(work / "b.txt", "nopqrstuvwxyz", 400, 2);
  data::BpeTrainer trainer({.vocab_size = 400, .special_tokens = {"<|endoftext|>"}});
  trainer.feed_file(work / "a.txt");
  trainer.feed_file(work / "b.txt");
  data::write_tokenizer_json(trainer.train(), work / "tokenizer.json");
  const data::Tokenizer tokenizer = data::Tokenizer::from_file(work / "tokenizer.json");
  for (const char* name : {"a", "b"}) {
    const data::PreprocessSummary s = data::preprocess(tokenizer, {.inputs = {work / fmt::format("{}.txt", name)},
                                                                   .output_prefix = (work / name).string(),
                                                                   .format = data::InputFormat::text,
                                                                   .append_eod = true});
    fmt::print("preprocessed {}: {} documents, {} tokens\n", name, s.documents, s.tokens);
  }
}

std::shared_ptr<const data::SampleSource> blend(const fs::path& work) {
  std::vector<std::shared_ptr<const data::SampleSource>> sources;
  for (const char* name : {"a", "b"}) {
    sources.push_back(std::make_shared<data::GptDataset>(data::IndexedDataset::open((work / name).string()),
                                                         data::GptDatasetConfig{.seq_len = kSeqLen}));
  }
  return std::make_shared<data::BlendedDataset>(sources, std::vector<double>{0.7, 0.3}, kBlendSize);
}

int run(const fs::path& work, std::int64_t steps) {
  auto world = dist::launched_by_mpi() ? dist::mpi_world() : dist::self_communicator();
  const int rank = world->rank(), ranks = world->size();
  if (rank == 0) prepare(work);
  world->barrier();  // the files exist before any rank opens them

  const data::Tokenizer tokenizer = data::Tokenizer::from_file(work / "tokenizer.json");
  const auto source = blend(work);
  // This rank's loader (the distributed sampler: its slice of every global batch), and the whole
  // global batch as one process would read it, to compare against.
  data::DataLoader loader(source, {.micro_batch_size = kMicroBatch, .dp_rank = rank, .dp_size = ranks});
  data::DataLoader whole(source, {.micro_batch_size = kMicroBatch * ranks, .prefetch = 0});

  const std::int64_t global_batch = kMicroBatch * ranks;
  std::int64_t from_a = 0, samples = 0, mismatches = 0, overlaps = 0;
  std::set<std::vector<std::int64_t>> first_pass;      // rank 0: every sample read before the blend wraps
  for (std::int64_t step = 0; step < steps; ++step) {  // forever, but for the test's step count
    const data::Batch mine = loader.next();
    Tensor gathered = Tensor::zeros({global_batch, kSeqLen}, DType::i64);
    world->all_gather(mine.tokens, gathered)->wait();
    // Disjoint slices: the ranks' stream positions, gathered, are this global batch's, each exactly once.
    Tensor positions = Tensor::zeros({global_batch}, DType::i64);
    world->all_gather(Tensor::from_vector(mine.sample_ids, {kMicroBatch}), positions)->wait();
    const auto seen = positions.to_vector<std::int64_t>();
    for (std::int64_t i = 0; i < global_batch; ++i)
      overlaps += seen[static_cast<std::size_t>(i)] != step * global_batch + i;
    const data::Batch expected = whole.next();
    const auto got = gathered.to_vector<std::int64_t>(), want = expected.tokens.to_vector<std::int64_t>();
    if (got != want) ++mismatches;
    if (rank == 0) {
      for (std::int64_t s = 0; s < global_batch; ++s) {
        const std::vector<std::int64_t> row(want.begin() + s * kSeqLen, want.begin() + (s + 1) * kSeqLen);
        // Within one pass no two ranks (nor two steps) are handed the same sample.
        if ((step * global_batch + s) < source->size() && !first_pass.insert(row).second) ++overlaps;
        std::vector<std::int32_t> ids(row.begin(), row.end());
        const std::string text = tokenizer.decode(ids, /*skip_special_tokens=*/true);
        from_a += text.find_first_of("nopqrstuvwxyz") == std::string::npos ? 1 : 0;
        ++samples;
      }
    }
  }
  mismatches = static_cast<std::int64_t>(world->all_reduce_scalar(static_cast<double>(mismatches)));
  overlaps = static_cast<std::int64_t>(world->all_reduce_scalar(static_cast<double>(overlaps)));
  const double share = samples > 0 ? static_cast<double>(from_a) / static_cast<double>(samples) : 0;
  const std::int64_t read = steps * global_batch;
  bool ok = mismatches == 0 && overlaps == 0 &&
            static_cast<std::int64_t>(first_pass.size()) == (rank == 0 ? source->size() : 0) && read > source->size();
  if (rank == 0) {
    ok = ok && std::fabs(share - 0.7) < 0.02;
    fmt::print("{} ranks read {} samples ({:.2f} passes over the blend of {}): {:.3f} from corpus a (weight 0.7)\n",
               ranks, read, static_cast<double>(read) / static_cast<double>(source->size()), source->size(), share);
    fmt::print("global batches that differ from one process's: {}\n", mismatches);
    fmt::print("samples two ranks shared or one pass repeated: {} ({} distinct in the first pass)\n", overlaps,
               first_pass.size());
    fmt::print("{}\n", ok ? "OK" : "FAIL");
  }
  return static_cast<int>(world->all_reduce_scalar(ok ? 0.0 : 1.0, dist::ReduceOp::max));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: data_pipeline WORK_DIR [STEPS]\n");
    return 2;
  }
  try {
    const int status = run(argv[1], argc > 2 ? std::stoll(argv[2]) : 300);
    dist::finalize();
    return status;
  } catch (const std::exception& e) {
    fmt::print(stderr, "data_pipeline: {}\n", e.what());
    dist::finalize_and_exit(1);
  }
}
