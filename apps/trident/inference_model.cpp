// Opening a checkpoint for inference (generate, eval): which checkpoint a path
// names, and its model and tokenizer, whole or tensor-parallel.
#include <fmt/format.h>

#include <filesystem>

#include "commands.h"
#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/models/hf.h"
#include "trident/train/trainer.h"

namespace trident::cli {

namespace fs = std::filesystem;

std::unique_ptr<checkpoint::CheckpointReader> open_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "meta.json")) return std::make_unique<checkpoint::CheckpointReader>(path);
  // A run directory or a checkpoint root: the newest checkpoint that verifies, as a resumed run
  // would choose it (`latest` first; a damaged one is skipped with a warning, not used).
  for (const fs::path& root : {fs::path(path), fs::path(path) / "checkpoints"}) {
    std::vector<std::string> skipped;
    auto reader = checkpoint::open_latest_valid_checkpoint(root.string(), &skipped);
    for (const std::string& why : skipped) fmt::print(stderr, "warning: skipping a checkpoint that does not verify: {}\n", why);
    if (reader) {
      if (!skipped.empty()) fmt::print(stderr, "warning: using the older checkpoint {}\n", reader->dir());
      return reader;
    }
    TRIDENT_CHECK(skipped.empty(), "--checkpoint '{}': no checkpoint under '{}' verifies (see the warnings above)",
                  path, root.string());
  }
  TRIDENT_FAIL("--checkpoint '{}' is neither a checkpoint (no meta.json) nor a run directory with checkpoints", path);
}

InferenceModel load_inference_model(const std::string& checkpoint, bool generates) {
  InferenceModel m;
  if (dist::launched_by_mpi()) m.tp.group = dist::mpi_world(300.0);
  // Rank 0 chooses the checkpoint and every rank loads that one: a rank that
  // judged on its own after a transient read error could load an older step.
  std::unique_ptr<checkpoint::CheckpointReader> reader = m.tp.rank() == 0 ? open_checkpoint(checkpoint) : nullptr;
  if (m.tp.active()) {
    const std::string chosen = m.tp.group->broadcast_text(reader ? reader->dir() : std::string());
    if (!reader) reader = std::make_unique<checkpoint::CheckpointReader>(chosen);
  }
  m.dir = reader->dir();
  m.spec = models::read_hf_config((fs::path(m.dir) / "config.json").string());
  const models::Family& family = models::family(m.spec.family);
  TRIDENT_CHECK(!generates || models::generates(family.objective),
                "trident generate: checkpoint {} holds a {} model, an encoder trained to fill in masked tokens: it "
                "cannot generate text (score it with `trident eval`, or `trident export` it for transformers' "
                "fill-mask pipeline)",
                m.dir, family.display_name);
  m.tokenizer = data::Tokenizer::load(fs::path(m.dir) / "tokenizer.json");
  m.model = std::make_unique<models::TransformerLM>(m.spec, m.tp.active() ? m.tp : nn::TensorParallel{});
  m.model->initialize(0);
  train::load_checkpoint_weights(*reader, *m.model);
  return m;
}

void add_precision_option(CLI::App& command, std::string& precision) {
  command.add_option("--precision", precision, "Compute dtype of the forward pass (weights stay f32)")
      ->check(CLI::Validator(
          [](const std::string& text) {
            try {
              parse_precision(text, "--precision");
              return std::string();
            } catch (const Error& e) {
              return e.message();
            }
          },
          "fp32|bf16|fp16"))
      ->capture_default_str();
}

DType precision_dtype(const std::string& precision) {
  return parse_precision(precision, "--precision");
}

}  // namespace trident::cli
