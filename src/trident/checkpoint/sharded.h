// Checkpoints in global coordinates.
//
// A checkpoint is a directory:
//   meta.json                  step, resolved config, layout, data position, RNG and
//                              scheduler state, format version, file checksums
//   shard-RRRRR.safetensors    the pieces rank R owns; every tensor's safetensors
//                              metadata entry gives its canonical name, global shape
//                              and offsets, so any layout can find what it needs
//   (anything else the run adds: config.toml, tokenizer.json)
//
// Tensor keys inside shard files are "<kind>/<canonical name>" (model/...,
// exp_avg/..., exp_avg_sq/...). A reader indexes every piece of every shard and
// assembles any box of any tensor from the pieces that overlap it, so a run
// saved under one parallel layout resumes under another.
//
// Writing goes to "<dir>.tmp", files are fsync'd, the directory is renamed into
// place, and the run's `latest` file is replaced last: a checkpoint appears
// whole or not at all, and `latest` always names a complete one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trident/checkpoint/safetensors.h"
#include "trident/core/tensor.h"

namespace trident::checkpoint {

inline constexpr int kFormatVersion = 1;

// One piece of a logical tensor: `data` holds the box at `offsets` within `global_shape`.
struct TensorPiece {
  std::string key;  // "model/transformer.h.0.attn.c_attn.weight"
  Shape global_shape;
  std::vector<std::int64_t> offsets;
  Tensor data;
};

// Writes one rank's pieces as a safetensors file (streamed, atomic). Returns the file's xxh64 checksum.
// Local: each rank writes its own file, no communication.
std::uint64_t write_shard(const std::string& path, const std::vector<TensorPiece>& pieces);
// xxh64 of a file's bytes (hex in meta.json).
std::uint64_t file_checksum(const std::string& path);

class CheckpointReader {
 public:
  // Opens DIR: reads meta.json, verifies each listed file's checksum, indexes every piece. Local: any rank
  // (or a program of one process) opens a checkpoint written under any layout and reads what it needs.
  explicit CheckpointReader(const std::string& dir);

  const std::string& dir() const noexcept { return dir_; }
  const nlohmann::json& meta() const noexcept { return meta_; }
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  const Shape& global_shape(const std::string& key) const;
  std::vector<std::string> keys() const;

  // Assembles the box at `offsets` of extent `shape` of tensor `key`, converted
  // to `dtype`. Errors name the tensor when it is missing, when the shapes
  // disagree, or when the pieces do not cover the box.
  Tensor read(const std::string& key, const std::vector<std::int64_t>& offsets, const Shape& shape, DType dtype) const;
  // The whole tensor.
  Tensor read(const std::string& key, DType dtype) const;

 private:
  struct Piece {
    std::size_t file;
    std::string tensor;  // name inside the safetensors file
    std::vector<std::int64_t> offsets;
    Shape shape;
  };
  struct Entry {
    Shape global_shape;
    std::vector<Piece> pieces;
  };
  std::string dir_;
  nlohmann::json meta_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry> index_;
};

// Directory protocol (single writer process; multi-rank runs call these on rank 0
// around a barrier). begin_checkpoint returns the temporary directory to write
// into; commit_checkpoint writes meta.json (adding the checksums of `files`),
// fsyncs, renames to `final_dir` and points `latest_file` at it.
std::string begin_checkpoint(const std::string& final_dir);
void commit_checkpoint(const std::string& tmp_dir, const std::string& final_dir, nlohmann::json meta,
                       const std::vector<std::string>& files, const std::string& latest_file);
// The checkpoint `latest_file` names (resolved against its directory), or "" when there is none.
std::string read_latest(const std::string& latest_file);
// The newest checkpoint under `root` that opens with every checksum right: the
// one `latest` names, else the newest step_N directory that does ("" when
// none). `skipped` receives why each rejected candidate failed.
std::string latest_valid_checkpoint(const std::string& root, std::vector<std::string>* skipped = nullptr);
// The same checkpoint, opened (its files already verified once), or null.
std::unique_ptr<CheckpointReader> open_latest_valid_checkpoint(const std::string& root,
                                                               std::vector<std::string>* skipped = nullptr);
// Keeps the newest `keep` checkpoints named step_* in `root` (never the one `latest` names), and those
// named in `also_keep` (directory names, step_NNNNNNNN: the best ones, train's checkpoint.keep_best).
void prune_checkpoints(const std::string& root, std::int64_t keep, const std::string& latest_dir,
                       const std::vector<std::string>& also_keep = {});

}  // namespace trident::checkpoint
