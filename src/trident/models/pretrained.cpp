#include "trident/models/pretrained.h"

#include <filesystem>

#include "trident/core/atomic_file.h"
#include "trident/core/memory.h"

namespace trident::models {

namespace fs = std::filesystem;

namespace {

std::string shard_file(int rank) { return fmt::format("shard-{:05d}.safetensors", rank); }

// The target directory as a path without a trailing separator ("out/" names "out").
fs::path target_of(const std::string& dir) {
  fs::path target = fs::path(dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();
  TRIDENT_CHECK(!target.empty(), "save_pretrained: the directory name is empty");
  return target;
}

// The sharded layout: rank 0 prepares DIR.tmp, every rank writes its pieces, rank 0 commits meta.json
// (with the files' checksums) and renames the whole into place.
void save_sharded(const std::vector<const TransformerLM*>& chunks, const fs::path& dir, dist::Communicator& world,
                  Replica replica, const std::vector<std::string>& extra_files, std::vector<std::string>& files) {
  const std::string final_dir = dir.string();
  const std::string tmp = final_dir + ".tmp";  // what begin_checkpoint prepares
  dist::on_every_rank(world, [&] {
    TRIDENT_CHECK(!chunks.empty(), "save_pretrained: rank {} holds no model chunk", world.rank());
    if (world.rank() != 0) return;
    if (dir.has_parent_path()) fs::create_directories(dir.parent_path());
    checkpoint::begin_checkpoint(final_dir);
  });
  dist::on_every_rank(world, [&] {
    std::vector<checkpoint::TensorPiece> pieces;
    for (const TransformerLM* chunk : chunks) {
      const int tp_rank = chunk->tensor_parallel().rank();
      for (const nn::Parameter* p : chunk->parameters()) {
        const int replica_rank = p->expert_parallel ? replica.expert_data_parallel_rank : replica.data_parallel_rank;
        if (p->tied_copy || replica_rank != 0 || (!p->tensor_parallel && tp_rank != 0)) continue;
        TRIDENT_CHECK(p->var.defined(), "save_pretrained: parameter '{}' is not initialised", p->name);
        append_pieces(pieces, "model/" + p->name, *p, p->var.data());
      }
    }
    checkpoint::write_shard((fs::path(tmp) / shard_file(world.rank())).string(), pieces);
    if (world.rank() == 0) {
      write_file_atomically(fs::path(tmp) / "config.json", hf_config_json(chunks.front()->spec()));
      for (const std::string& extra : extra_files) {
        const std::string name = fs::path(extra).filename().string();
        TRIDENT_CHECK(name != "config.json" && name != "meta.json" && !name.starts_with("shard-"),
                      "save_pretrained: extra file '{}' would replace the save's own '{}'", extra, name);
        write_file_atomically(fs::path(tmp) / name, read_whole_file(extra, "file to save"));
      }
    }
  });
  files = {"config.json"};
  for (const std::string& extra : extra_files) files.push_back(fs::path(extra).filename().string());
  for (int r = 0; r < world.size(); ++r) files.push_back(shard_file(r));
  dist::on_every_rank(world, [&] {
    if (world.rank() != 0) return;
    const nlohmann::json meta = {{"kind", "pretrained"}, {"world_size", world.size()}};
    checkpoint::commit_checkpoint(tmp, final_dir, meta, files, "");
  });
  files.push_back("meta.json");
}

}  // namespace

bool is_sharded_save(const std::string& dir) { return fs::exists(fs::path(dir) / "meta.json"); }

TransformerSpec pretrained_spec(const std::string& dir) {
  const fs::path config = fs::path(dir) / "config.json";
  TRIDENT_CHECK(fs::is_directory(dir), "'{}' is not a model directory (expected config.json and the weights)", dir);
  TRIDENT_CHECK(fs::exists(config), "'{}' has no config.json (expected a Hugging Face directory or a sharded save)",
                dir);
  return read_hf_config(config.string());
}

void load_pretrained(TransformerLM& model, const std::string& dir) {
  if (!is_sharded_save(dir)) {
    load_hf_weights(model, dir);
    return;
  }
  const checkpoint::CheckpointReader reader(dir);  // every file's checksum verified
  MemoryCategoryScope scope(MemoryCategory::parameters);
  for (nn::Parameter* p : model.parameters()) {
    TRIDENT_CHECK(p->var.defined(), "load_pretrained: parameter '{}' is not initialised", p->name);
    const std::int64_t rows = p->local_shape().rank() ? p->local_shape()[0] : 1;
    p->var.set_data(read_local_rows(reader, "model/" + p->name, *p, 0, rows, p->var.dtype()));
  }
}

std::unique_ptr<TransformerLM> from_pretrained(const std::string& dir, const ModelParallel& parallel, StageRange stage,
                                          std::uint64_t seed) {
  auto model = std::make_unique<TransformerLM>(pretrained_spec(dir), parallel, stage);
  model->initialize(seed);
  load_pretrained(*model, dir);
  return model;
}

std::vector<std::string> save_pretrained(const std::vector<const TransformerLM*>& chunks, const std::string& dir,
                                         dist::Communicator& world, Replica replica, const SaveOptions& options) {
  const fs::path target = target_of(dir);
  std::vector<std::string> files;
  if (!options.merged) {
    save_sharded(chunks, target, world, replica, options.extra_files, files);
    return files;
  }
  // Merged: the ranks' pieces first (no rank holds the whole model), then rank 0 assembles each
  // tensor from them as the Hugging Face file reaches it.
  const fs::path pieces = target.string() + ".pieces";
  std::vector<std::string> ignored;
  save_sharded(chunks, pieces, world, replica, {}, ignored);
  std::string written;
  dist::on_every_rank(world, [&] {
    if (world.rank() != 0) return;
    try {
      const checkpoint::CheckpointReader reader(pieces.string());
      for (const std::string& f :
           merge_pretrained(reader, target.string(), options.dtype, options.max_shard_bytes, options.extra_files))
        written += f + "\n";
    } catch (...) {
      std::error_code ec;
      fs::remove_all(pieces, ec);
      throw;
    }
    fs::remove_all(pieces);
  });
  written = world.broadcast_text(written);
  for (std::size_t begin = 0, end; (end = written.find('\n', begin)) != std::string::npos; begin = end + 1)
    files.push_back(written.substr(begin, end - begin));
  return files;
}

std::vector<std::string> merge_pretrained(const checkpoint::CheckpointReader& reader, const std::string& out,
                                          DType dtype, std::uint64_t max_shard_bytes,
                                          const std::vector<std::string>& extra_files) {
  const std::string& dir = reader.dir();
  const TransformerSpec spec = read_hf_config((fs::path(dir) / "config.json").string());
  return write_hf(
      spec, out, dtype,
      [&](const std::string& name, DType dt) {
        const std::string key = "model/" + name;
        TRIDENT_CHECK(reader.contains(key), "checkpoint '{}' has no tensor '{}' (expected shape {})", dir, key,
                      TransformerLM(spec).find_parameter(name)->global_shape);
        return reader.read(key, dt);
      },
      max_shard_bytes, extra_files);
}

void append_pieces(std::vector<checkpoint::TensorPiece>& out, const std::string& key, const nn::Parameter& p,
                   const Tensor& device_data, std::int64_t row_begin) {
  const Tensor data = device_data.to(Device::cpu());  // the writer reads host memory
  const std::int64_t rows = data.rank() ? data.shape()[0] : 1;
  for (const nn::ShardPiece& piece : p.shard.pieces_in_rows(row_begin, row_begin + rows)) {
    Tensor box = p.shard.is_whole() && data.shape() == piece.extent
                     ? data
                     : nn::copy_box_out(data, piece.local_offsets, piece.extent);
    out.push_back({key, p.global_shape, piece.global_offsets, box});
  }
}

Tensor read_local_rows(const checkpoint::CheckpointReader& reader, const std::string& key, const nn::Parameter& p,
                       std::int64_t row_begin, std::int64_t rows, DType dtype) {
  TRIDENT_CHECK(reader.contains(key), "checkpoint '{}' has no tensor '{}'", reader.dir(), key);
  TRIDENT_CHECK(reader.global_shape(key) == p.global_shape,
                "checkpoint '{}': tensor '{}' has shape {} but the model expects {}", reader.dir(), key,
                reader.global_shape(key), p.global_shape);
  Shape shape = p.local_shape();
  if (shape.rank()) shape[0] = rows;
  Tensor out = Tensor::zeros(shape, dtype);
  for (const nn::ShardPiece& piece : p.shard.pieces_in_rows(row_begin, row_begin + rows)) {
    nn::copy_box_into(out, reader.read(key, piece.global_offsets, piece.extent, dtype), piece.local_offsets);
  }
  return out;
}

}  // namespace trident::models
