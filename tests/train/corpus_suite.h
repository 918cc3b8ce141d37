// The fixture of the training tests that train the tiny GPT (tiny_run) on one make_corpus corpus per
// suite, and how they read a checkpoint's model back.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "corpus.h"
#include "trident/checkpoint/sharded.h"
#include "trident/train/trainer.h"

namespace trident::testing {

// Suite derives from CorpusSuite<Suite> and names its directory in a public kDir: the suite's corpus
// (kLines lines, unless Suite says otherwise, publicly too) is made fresh in trident-<kDir>-<pid>
// under the temporary directory, and removed after the suite.
template <class Suite>
class CorpusSuite : public ::testing::Test {
 public:
  static constexpr int kLines = 3000;

 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / fmt::format("trident-{}-{}", Suite::kDir, ::getpid());
    std::filesystem::remove_all(dir_);
    make_corpus(dir_, Suite::kLines);
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  // A quiet training into dir_/run: tiny_run's overrides, its data cache dir_/cache, then `extra`.
  static train::TrainOptions options_with_cache(const std::string& run, const std::string& cache,
                                                const std::vector<std::string>& extra) {
    train::TrainOptions o;
    o.overrides = tiny_run(dir_, cache);
    o.overrides.insert(o.overrides.end(), extra.begin(), extra.end());
    o.run_dir = (dir_ / run).string();
    o.quiet = true;
    return o;
  }
  // The same with a data cache of the run's own, dir_/cache-<run>.
  static train::TrainOptions options(const std::string& run, const std::vector<std::string>& extra) {
    return options_with_cache(run, "cache-" + run, extra);
  }

  static inline std::filesystem::path dir_;
};

// Every value of the model's tensors in a checkpoint (keys model/..., in the reader's order), as f64.
inline std::vector<double> model_values(const std::string& checkpoint_dir) {
  checkpoint::CheckpointReader r(checkpoint_dir);
  std::vector<double> all;
  for (const auto& key : r.keys()) {
    if (!key.starts_with("model/")) continue;
    auto v = r.read(key, DType::f64).to_vector<double>();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

}  // namespace trident::testing
