// Loading and saving a model under any parallel layout: the library's from_pretrained and
// save_pretrained (what the trainer's model.from_pretrained and `trident export` use too).
//
// A model directory is one of two kinds, both with a config.json (transformers' keys):
//   merged   a Hugging Face directory: model.safetensors (or model-0000N-of-0000M.safetensors and
//            model.safetensors.index.json; read also: pytorch_model.bin), what transformers reads;
//   sharded  trident's checkpoint layout (checkpoint/sharded.h): meta.json and one
//            shard-RRRRR.safetensors per rank holding the boxes of the global tensors that rank
//            owned, each stored with its canonical name, global shape and offsets. Every rank
//            writes its own file at once, with no gathering; any layout reads it back.
// Either kind loads into any layout: each rank reads only the boxes its parameters hold.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trident/checkpoint/sharded.h"
#include "trident/dist/communicator.h"
#include "trident/models/transformer_lm.h"
#include "trident/models/hf.h"

namespace trident::models {

// True when DIR is a sharded save or a training checkpoint (it has meta.json).
bool is_sharded_save(const std::string& dir);

// The model a directory of either kind holds (its config.json). Errors name the file and key.
TransformerSpec pretrained_spec(const std::string& dir);

// Fills every parameter of `model` — whole, one tensor-parallel shard, one pipeline stage — from
// DIR of either kind, reading only this rank's boxes. Parameters must be initialised
// (Module::initialize); those a Hugging Face directory may lack (Family::optional_in_hf) keep their
// initial values. Errors name the directory, the tensor and both shapes. Any rank may call it alone.
void load_pretrained(TransformerLM& model, const std::string& dir);

// Builds this rank's part of the model in DIR — the shard `parallel` gives (tensor- and expert-parallel
// groups; none = whole), the layers of `stage` — initialises it from `seed` (Module::initialize, in
// fp32) and loads it (load_pretrained). The caller owns the result. Each rank calls it for its own part;
// nothing is communicated.
std::unique_ptr<TransformerLM> from_pretrained(const std::string& dir, const ModelParallel& parallel = {},
                                          StageRange stage = {}, std::uint64_t seed = 0);

struct SaveOptions {
  // true: a Hugging Face directory (rank 0 assembles it from the ranks' pieces, one tensor at a time);
  // false: the sharded layout (every rank writes its own file).
  bool merged = true;
  DType dtype = DType::f32;  // merged: the weights' dtype (fp32, bf16 or fp16); sharded saves keep fp32
  std::uint64_t max_shard_bytes = kDefaultMaxShardBytes;  // merged: transformers' file size limit
  std::vector<std::string> extra_files = {};             // copied into DIR (a tokenizer.json, say)
};

// This rank's copy of the parameters, among the ranks holding the same ones (data-parallel ranks, and
// under context parallelism the cp ranks beside them: dp × cp): 0 writes them.
struct Replica {
  int data_parallel_rank = 0;
  int expert_data_parallel_rank = 0;  // for expert-parallel parameters (Parameter::expert_parallel)
};

// Saves the model whose parts the ranks of `world` hold to DIR; every rank of `world` calls it with
// its own chunks (one per model chunk it holds: its pipeline stage(s), its tensor-parallel shards).
// A parameter is written by its first data-parallel replica, a replicated one by tensor-parallel
// rank 0, a tied copy never. DIR appears whole or not at all (written beside it, then renamed); an
// error on any rank is thrown on every rank. Returns DIR's files (the same list on every rank).
std::vector<std::string> save_pretrained(const std::vector<const TransformerLM*>& chunks, const std::string& dir,
                                         dist::Communicator& world, Replica replica = {},
                                         const SaveOptions& options = {});

// Writes the Hugging Face directory OUT (config.json, the weights, `extra_files`) from a sharded
// save or training checkpoint already open, one tensor at a time (`trident export`). Returns the
// files written.
std::vector<std::string> merge_pretrained(const checkpoint::CheckpointReader& reader, const std::string& out,
                                          DType dtype = DType::f32,
                                          std::uint64_t max_shard_bytes = kDefaultMaxShardBytes,
                                          const std::vector<std::string>& extra_files = {});

// Pieces in global coordinates, shared with the trainer's checkpoints (train/run_checkpoint.h).
// Rows [0, rows) of `data` hold local rows [row_begin, row_begin + rows) of parameter `p`: appends
// their boxes (the vocabulary padding left out) as pieces named `key`.
void append_pieces(std::vector<checkpoint::TensorPiece>& out, const std::string& key, const nn::Parameter& p,
                   const Tensor& data, std::int64_t row_begin = 0);
// Local rows [row_begin, row_begin + rows) of parameter `p`'s tensor `key` in `dtype` (padding rows
// zero), assembled from the pieces `reader` holds. Errors name the checkpoint, the key and the shapes.
Tensor read_local_rows(const checkpoint::CheckpointReader& reader, const std::string& key, const nn::Parameter& p,
                       std::int64_t row_begin, std::int64_t rows, DType dtype);

}  // namespace trident::models
