// nn::Module: named parameters with canonical names and global shapes.
//
// Every parameter carries the name Hugging Face uses for it (the canonical
// name, docs/numerics.md#canonical-names-and-global-shapes), its global shape, and where this rank's local tensor
// sits inside it (a ShardSpec: one or more boxes — several for fused tensors
// such as GPT-2's c_attn whose tensor-parallel shard takes whole heads from
// each of q, k and v). Initial values are drawn by the counter-based RNG from
// (seed, name, global index), so any sharding of a model starts from exactly
// the slices of the unsharded model.
//
// Modules are built with their full name prefix ("transformer.h.3.attn"), so a
// parameter knows its canonical name at construction.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "trident/autograd/variable.h"
#include "trident/core/rng.h"
#include "trident/core/tensor.h"

namespace trident::nn {

using autograd::Variable;

// One box of a shard: the local sub-box at local_offsets equals the global
// sub-box at global_offsets, both of shape `extent`.
struct ShardPiece {
  std::vector<std::int64_t> local_offsets;
  std::vector<std::int64_t> global_offsets;
  Shape extent;
};

struct ShardSpec {
  Shape local_shape;
  std::vector<ShardPiece> pieces;  // where the local tensor's values sit globally (when sharded)
  bool sharded = false;            // false: the local tensor is the whole global tensor
  bool is_whole() const noexcept { return !sharded; }

  static ShardSpec whole(const Shape& global);
  // Dimension `dim` of `global` is made of `segments` (sizes summing to
  // global[dim]; empty = one segment), each split into `parts` equal chunks;
  // this rank keeps chunk `part` of every segment, concatenated in order. One
  // segment is Megatron's plain column/row split; three are GPT-2's fused
  // q|k|v, whose shard then holds whole heads of each.
  static ShardSpec split(const Shape& global, std::size_t dim, int part, int parts,
                         std::vector<std::int64_t> segments = {});
  // Rows of a [rows, ...] tensor padded to `padded_rows` and split into `parts`
  // equal chunks: the local tensor has padded_rows/parts rows, of which only
  // those below `global[0]` are real (the vocabulary-parallel embedding).
  static ShardSpec padded_rows(const Shape& global, std::int64_t padded_rows, int part, int parts);

  // The pieces that fall within local rows [begin, end), with local offsets
  // relative to row `begin` (a ZeRO partition of the local tensor). For a whole
  // tensor: one piece at global row `begin`.
  std::vector<ShardPiece> pieces_in_rows(std::int64_t begin, std::int64_t end) const;
};

enum class InitKind { normal, zeros, ones };

struct Init {
  InitKind kind = InitKind::normal;
  double std = 0.02;
};

struct Parameter {
  std::string name;   // canonical (Hugging Face) name
  Shape global_shape;
  ShardSpec shard;
  Init init;
  bool weight_decay = true;     // AdamW decays matrices and embeddings, not biases or norm weights
  bool tensor_parallel = false; // sharded over the TP group (else replicated there)
  // A second copy of a tied parameter (the last pipeline stage's LM head, which
  // is the token embedding): not checkpointed, counted once in norms, and its
  // gradient is summed with the original's (the embedding group's all-reduce).
  bool tied_copy = false;
  // An expert's weights under expert parallelism (nn::MoE): this rank's experts, which its expert-parallel
  // peers do not hold; replicated over the expert-data-parallel group (dist::Mesh), not the data-parallel one.
  bool expert_parallel = false;
  Variable var;                 // the local tensor (master dtype), requires grad

  const Shape& local_shape() const { return shard.local_shape; }
  // The whole tensor [global_shape] of a parameter this rank holds all of: var's data, or the real rows
  // of a vocabulary table padded on one rank (model.make_vocab_size_divisible_by), a view without
  // the padding. A shard of a larger tensor is an error naming the parameter.
  Tensor whole_value() const;
};

// Copies `box` into `dst` at `offsets` (same rank and dtype; host tensors).
void copy_box_into(Tensor& dst, const Tensor& box, const std::vector<std::int64_t>& offsets);

// The box of `src` at `offsets` of shape `extent`, as a new tensor.
Tensor copy_box_out(const Tensor& src, const std::vector<std::int64_t>& offsets, const Shape& extent);

// Fills `t` (local shape) with the parameter's initial values at its global coordinates.
void initialize_parameter(const Parameter& p, Tensor& t, std::uint64_t seed);

class Module {
 public:
  explicit Module(std::string prefix) : prefix_(std::move(prefix)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& prefix() const noexcept { return prefix_; }
  // This module's and its descendants' parameters, in registration order.
  std::vector<Parameter*> parameters();
  std::vector<const Parameter*> parameters() const;
  Parameter* find_parameter(const std::string& name);

  // Allocates every parameter (dtype = master dtype) and initialises it.
  void initialize(std::uint64_t seed, DType dtype = DType::f32);
  // Moves every parameter's tensor to `device` (values unchanged; gradients dropped).
  void to(Device device);
  void zero_grad();
  std::int64_t num_parameters() const;  // global count, each parameter once

 protected:
  // Registers a whole (unsharded) parameter named prefix + "." + local_name.
  Parameter& add_parameter(const std::string& local_name, Shape global_shape, Init init, bool weight_decay);
  // Registers a sharded parameter.
  Parameter& add_parameter(const std::string& local_name, Shape global_shape, ShardSpec shard, Init init,
                           bool weight_decay);
  template <typename M>
  M& add_module(std::unique_ptr<M> child) {
    M& ref = *child;
    children_.push_back(std::move(child));
    return ref;
  }
  std::string child_prefix(const std::string& name) const { return prefix_.empty() ? name : prefix_ + "." + name; }

 private:
  std::string prefix_;
  std::deque<Parameter> params_;
  std::vector<std::unique_ptr<Module>> children_;
};

}  // namespace trident::nn
