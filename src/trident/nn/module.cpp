#include "trident/nn/module.h"

#include <algorithm>
#include <cstring>

#include "trident/core/convert.h"
#include "trident/core/interrupt.h"
#include "trident/core/memory.h"

namespace trident::nn {

namespace {

// Copies between a tensor `big` and a box of it at `offsets` of shape `box`,
// one innermost run at a time: into `big` (into_big) or out of it into `small`.
void copy_box(const Tensor& big, const Tensor& small, const std::vector<std::int64_t>& offsets, bool into_big) {
  const std::size_t r = small.rank();
  TRIDENT_CHECK(big.rank() == r && offsets.size() == r && big.dtype() == small.dtype(),
                "copy_box: box {} at {} offsets does not fit {}", small.describe(), offsets.size(), big.describe());
  for (std::size_t d = 0; d < r; ++d) {
    TRIDENT_CHECK(offsets[d] >= 0 && offsets[d] + small.shape()[d] <= big.shape()[d],
                  "copy_box: box {} at offset {} exceeds {} in dimension {}", small.shape(), offsets[d], big.shape(), d);
  }
  TRIDENT_CHECK(big.device().is_cpu() && small.device().is_cpu(),
                "copy_box: {} and {} must be host tensors (copy GPU tensors to the host first)", big.describe(),
                small.describe());
  const std::size_t esz = dtype_size(big.dtype());
  auto* big_bytes = static_cast<char*>(big.raw_data());
  auto* small_bytes = static_cast<char*>(small.raw_data());
  if (r == 0) {
    into_big ? std::memcpy(big_bytes, small_bytes, esz) : std::memcpy(small_bytes, big_bytes, esz);
    return;
  }
  const std::int64_t run = small.shape()[r - 1];
  const std::int64_t rows = run ? small.numel() / run : 0;
  const std::size_t run_bytes = static_cast<std::size_t>(run) * esz;
  for (std::int64_t row = 0; row < rows; ++row) {
    std::int64_t rem = row, off = offsets[r - 1], stride = big.shape()[r - 1];
    for (std::size_t d = r - 1; d-- > 0;) {
      off += (rem % small.shape()[d] + offsets[d]) * stride;
      rem /= small.shape()[d];
      stride *= big.shape()[d];
    }
    char* b = big_bytes + static_cast<std::size_t>(off) * esz;
    char* s = small_bytes + static_cast<std::size_t>(row * run) * esz;
    into_big ? std::memcpy(b, s, run_bytes) : std::memcpy(s, b, run_bytes);
  }
}

}  // namespace

void copy_box_into(Tensor& dst, const Tensor& box, const std::vector<std::int64_t>& offsets) {
  copy_box(dst, box, offsets, true);
}

Tensor copy_box_out(const Tensor& src, const std::vector<std::int64_t>& offsets, const Shape& extent) {
  Tensor out = Tensor::empty(extent, src.dtype(), src.device());
  copy_box(src, out, offsets, false);
  return out;
}

ShardSpec ShardSpec::whole(const Shape& global) { return ShardSpec{global, {}, false}; }

ShardSpec ShardSpec::split(const Shape& global, std::size_t dim, int part, int parts,
                           std::vector<std::int64_t> segments) {
  TRIDENT_CHECK(dim < global.rank(), "ShardSpec::split: dimension {} of {}", dim, global);
  TRIDENT_CHECK(parts >= 1 && part >= 0 && part < parts, "ShardSpec::split: part {} of {}", part, parts);
  if (segments.empty()) segments.push_back(global[dim]);
  std::int64_t total = 0;
  for (std::int64_t s : segments) total += s;
  TRIDENT_CHECK(total == global[dim], "ShardSpec::split: segments sum to {} but dimension {} of {} is {}", total, dim,
                global, global[dim]);
  ShardSpec spec;
  spec.sharded = true;
  spec.local_shape = global;
  std::int64_t local_at = 0, global_at = 0;
  for (std::int64_t s : segments) {
    TRIDENT_CHECK(s % parts == 0, "tensor parallelism: size {} (dimension {} of {}) does not divide by {} ranks", s,
                  dim, global, parts);
    const std::int64_t chunk = s / parts;
    ShardPiece piece{std::vector<std::int64_t>(global.rank(), 0), std::vector<std::int64_t>(global.rank(), 0), global};
    piece.local_offsets[dim] = local_at;
    piece.global_offsets[dim] = global_at + part * chunk;
    piece.extent[dim] = chunk;
    if (chunk > 0) spec.pieces.push_back(std::move(piece));
    local_at += chunk;
    global_at += s;
  }
  spec.local_shape[dim] = local_at;
  return spec;
}

Tensor Parameter::whole_value() const {
  TRIDENT_CHECK(var.defined(), "parameter '{}' is not initialised", name);
  if (shard.is_whole()) return var.data();
  const auto zero = [](const std::vector<std::int64_t>& v) {
    return std::all_of(v.begin(), v.end(), [](std::int64_t o) { return o == 0; });
  };
  const bool padded_whole = shard.pieces.size() == 1 && shard.pieces[0].extent == global_shape &&
                            zero(shard.pieces[0].global_offsets) && zero(shard.pieces[0].local_offsets);
  TRIDENT_CHECK(padded_whole, "parameter '{}' is a shard {} of {}: its whole value is on several ranks (export "
                "through a checkpoint)", name, shard.local_shape, global_shape);
  return var.data().slice0(0, global_shape[0]);
}

ShardSpec ShardSpec::padded_rows(const Shape& global, std::int64_t padded_rows, int part, int parts) {
  TRIDENT_CHECK(global.rank() >= 1 && padded_rows >= global[0] && padded_rows % parts == 0,
                "ShardSpec::padded_rows: {} rows padded to {} over {} parts", global, padded_rows, parts);
  ShardSpec spec;
  spec.sharded = true;
  spec.local_shape = global;
  const std::int64_t chunk = padded_rows / parts, begin = part * chunk;
  spec.local_shape[0] = chunk;
  const std::int64_t real = std::clamp<std::int64_t>(global[0] - begin, 0, chunk);
  if (real > 0) {
    ShardPiece piece{std::vector<std::int64_t>(global.rank(), 0), std::vector<std::int64_t>(global.rank(), 0), global};
    piece.global_offsets[0] = begin;
    piece.extent[0] = real;
    spec.pieces.push_back(std::move(piece));
  }
  return spec;
}

std::vector<ShardPiece> ShardSpec::pieces_in_rows(std::int64_t begin, std::int64_t end) const {
  std::vector<ShardPiece> out;
  if (end <= begin) return out;
  if (!sharded) {
    ShardPiece piece{std::vector<std::int64_t>(local_shape.rank(), 0),
                     std::vector<std::int64_t>(local_shape.rank(), 0), local_shape};
    if (local_shape.rank() == 0) return {piece};
    piece.global_offsets[0] = begin;
    piece.extent[0] = end - begin;
    return {piece};
  }
  for (const ShardPiece& p : pieces) {
    const std::int64_t lo = std::max(begin, p.local_offsets[0]);
    const std::int64_t hi = std::min(end, p.local_offsets[0] + p.extent[0]);
    if (hi <= lo) continue;
    ShardPiece q = p;
    q.local_offsets[0] = lo - begin;
    q.global_offsets[0] = p.global_offsets[0] + (lo - p.local_offsets[0]);
    q.extent[0] = hi - lo;
    out.push_back(std::move(q));
  }
  return out;
}

void initialize_parameter(const Parameter& p, Tensor& t, std::uint64_t seed) {
  TRIDENT_CHECK(t.shape() == p.local_shape(), "initialize '{}': tensor {} does not match local shape {}", p.name,
                t.describe(), p.local_shape());
  if (p.init.kind != InitKind::normal) {
    t.fill_zero();
    if (p.init.kind == InitKind::ones) fill_value(t, 1.0);
    TRIDENT_CHECK(p.init.kind == InitKind::zeros || p.shard.is_whole() ||
                      (p.shard.pieces.size() == 1 && p.shard.pieces[0].extent == p.local_shape()),
                  "initialize '{}': ones-initialised parameters cannot be padded", p.name);
    return;
  }
  const CounterRng rng(seed, "init/" + p.name);
  if (!p.shard.is_whole()) t.fill_zero();  // rows outside every piece are padding
  if (p.shard.is_whole()) {
    fill_normal(t, rng, 0.0, p.init.std);
    return;
  }
  // Each piece: draw the global box, then place it at its local offsets.
  for (const ShardPiece& piece : p.shard.pieces) {
    Tensor box = Tensor::empty(piece.extent, t.dtype());
    fill_normal(box, rng, 0.0, p.init.std, GlobalSlice{p.global_shape, piece.global_offsets});
    copy_box_into(t, box, piece.local_offsets);
  }
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  for (Parameter& p : params_) out.push_back(&p);
  for (auto& c : children_) {
    auto sub = c->parameters();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<const Parameter*> Module::parameters() const {
  std::vector<const Parameter*> out;
  for (const Parameter& p : params_) out.push_back(&p);
  for (const auto& c : children_) {
    const Module& child = *c;
    auto sub = child.parameters();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

Parameter* Module::find_parameter(const std::string& name) {
  for (Parameter* p : parameters())
    if (p->name == name) return p;
  return nullptr;
}

void Module::initialize(std::uint64_t seed, DType dtype) {
  MemoryCategoryScope scope(MemoryCategory::parameters);
  for (Parameter* p : parameters()) {
    interruption_point(LongWait::model_init);  // a large model takes long: a signal abandons it
    Tensor t = Tensor::empty(p->local_shape(), dtype);
    initialize_parameter(*p, t, seed);
    p->var = Variable(t, true);
    p->var.set_name(p->name);
  }
}

void Module::to(Device device) {
  MemoryCategoryScope scope(MemoryCategory::parameters);
  for (Parameter* p : parameters()) {
    if (!p->var.defined() || p->var.device() == device) continue;
    p->var = Variable(p->var.data().to(device), true);
    p->var.set_name(p->name);
  }
}

void Module::zero_grad() {
  for (Parameter* p : parameters()) p->var.zero_grad();
}

std::int64_t Module::num_parameters() const {
  std::int64_t n = 0;
  for (const Parameter* p : parameters()) n += p->global_shape.numel();
  return n;
}

Parameter& Module::add_parameter(const std::string& local_name, Shape global_shape, Init init, bool weight_decay) {
  ShardSpec whole = ShardSpec::whole(global_shape);
  return add_parameter(local_name, std::move(global_shape), std::move(whole), init, weight_decay);
}

Parameter& Module::add_parameter(const std::string& local_name, Shape global_shape, ShardSpec shard, Init init,
                                 bool weight_decay) {
  Parameter p;
  p.name = child_prefix(local_name);
  for (const Parameter& q : params_) TRIDENT_CHECK(q.name != p.name, "parameter '{}' registered twice", p.name);
  p.global_shape = std::move(global_shape);
  p.shard = std::move(shard);
  p.init = init;
  p.weight_decay = weight_decay;
  p.tensor_parallel = !p.shard.is_whole();
  params_.push_back(std::move(p));
  return params_.back();
}

}  // namespace trident::nn
