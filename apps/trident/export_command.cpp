// trident export --checkpoint DIR --output HF_DIR [--dtype fp32|bf16|fp16] [--max-shard-size 5GB]
//
// Writes a Hugging Face model directory (config.json, safetensors weights —
// sharded with model.safetensors.index.json above the size limit — and the
// run's tokenizer.json) from a checkpoint saved under any parallel layout.
// Each tensor is assembled from the checkpoint's pieces (mmap'd) just before
// it is written, so memory holds one tensor at a time whatever the model's
// size. trident's checkpoint names and shapes are transformers' already
// (GPT-2's Conv1D [in, out], LLaMA's separate q/k/v), and the pieces never
// include the tensor-parallel vocabulary padding.
#include <fmt/format.h>

#include <cctype>
#include <filesystem>

#include "commands.h"
#include "trident/checkpoint/sharded.h"
#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/models/pretrained.h"
#include "trident/train/inference.h"

namespace trident::cli {

namespace fs = std::filesystem;

namespace {

struct ExportOptions {
  std::string checkpoint;
  std::string output;
  std::string dtype = "fp32";
  std::string max_shard_size = "5GB";
};

// "5GB", "500MB", "2GiB", "123456" (bytes); decimal units as transformers uses them.
std::uint64_t parse_size(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double value = 0;
  try {
    value = i > 0 ? std::stod(text.substr(0, i)) : -1;
  } catch (const std::exception&) {
    value = -1;
  }
  const std::pair<const char*, double> units[] = {{"", 1},          {"B", 1},          {"KB", 1e3},
                                                  {"MB", 1e6},      {"GB", 1e9},       {"KIB", 1024.0},
                                                  {"MIB", 1048576.0}, {"GIB", 1073741824.0}};
  for (const auto& [name, scale] : units) {
    if (unit == name && value > 0) return static_cast<std::uint64_t>(value * scale);
  }
  TRIDENT_FAIL("--max-shard-size '{}' is not a size (e.g. 5GB, 500MB, 2GiB or a number of bytes)", text);
}

void export_checkpoint(const ExportOptions& o) {
  const DType dtype = parse_precision(o.dtype, "--dtype");
  const std::uint64_t limit = parse_size(o.max_shard_size);
  prepare_output_option("--output", o.output, true);
  const auto opened = train::open_checkpoint(o.checkpoint);  // every file's checksum verified
  const checkpoint::CheckpointReader& reader = *opened;
  const std::string& dir = reader.dir();
  const models::TransformerSpec spec = models::read_hf_config((fs::path(dir) / "config.json").string());
  const fs::path tokenizer = fs::path(dir) / "tokenizer.json";
  std::vector<std::string> extra;
  if (fs::exists(tokenizer)) extra.push_back(tokenizer.string());
  const auto files = models::merge_pretrained(reader, o.output, dtype, limit, extra);
  fmt::print("exported {} (step {}, {:.2f}M parameters, {}) to {}: {}\n", dir, reader.meta().value("step", 0),
             static_cast<double>(spec.num_parameters()) / 1e6, o.dtype, o.output, fmt::join(files, ", "));
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Write a checkpoint (any parallel layout) as a Hugging Face model");
  auto o = std::make_shared<ExportOptions>();
  cmd->add_option("--checkpoint", o->checkpoint,
                  "A checkpoint, or a run directory (its newest checkpoint that verifies)")
      ->required();
  cmd->add_option("--output", o->output, "The Hugging Face directory to write")->required();
  cmd->add_option("--dtype", o->dtype, "Weights dtype: fp32, bf16 or fp16")->capture_default_str();
  cmd->add_option("--max-shard-size", o->max_shard_size,
                  "Split the weights into files of at most this size (transformers' default 5GB)")
      ->capture_default_str();
  cmd->callback([o] { export_checkpoint(*o); });
}

}  // namespace trident::cli
