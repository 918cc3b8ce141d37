#include "trident/nn/module.h"

#include <cstring>

#include "trident/core/convert.h"
#include "trident/core/memory.h"

namespace trident::nn {

void copy_box_into(Tensor& dst, const Tensor& box, const std::vector<std::int64_t>& offsets) {
  const std::size_t r = box.rank();
  TRIDENT_CHECK(dst.rank() == r && offsets.size() == r && dst.dtype() == box.dtype(),
                "copy_box_into: box {} at {} offsets does not fit {}", box.describe(), offsets.size(), dst.describe());
  for (std::size_t d = 0; d < r; ++d) {
    TRIDENT_CHECK(offsets[d] >= 0 && offsets[d] + box.shape()[d] <= dst.shape()[d],
                  "copy_box_into: box {} at offset {} exceeds {} in dimension {}", box.shape(), offsets[d],
                  dst.shape(), d);
  }
  const std::size_t esz = dtype_size(dst.dtype());
  if (r == 0) {
    std::memcpy(dst.raw_data(), box.raw_data(), esz);
    return;
  }
  const std::int64_t run = box.shape()[r - 1];
  const std::int64_t rows = run ? box.numel() / run : 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    std::int64_t rem = row, off = offsets[r - 1], stride = dst.shape()[r - 1];
    for (std::size_t d = r - 1; d-- > 0;) {
      off += (rem % box.shape()[d] + offsets[d]) * stride;
      rem /= box.shape()[d];
      stride *= dst.shape()[d];
    }
    std::memcpy(static_cast<char*>(dst.raw_data()) + static_cast<std::size_t>(off) * esz,
                static_cast<const char*>(box.raw_data()) + static_cast<std::size_t>(row * run) * esz,
                static_cast<std::size_t>(run) * esz);
  }
}

void initialize_parameter(const Parameter& p, Tensor& t, std::uint64_t seed) {
  TRIDENT_CHECK(t.shape() == p.local_shape(), "initialize '{}': tensor {} does not match local shape {}", p.name,
                t.describe(), p.local_shape());
  if (p.init.kind != InitKind::normal) {
    t.fill_zero();
    if (p.init.kind == InitKind::ones) fill_value(t, 1.0);
    return;
  }
  const CounterRng rng(seed, "init/" + p.name);
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
    Tensor t = Tensor::empty(p->local_shape(), dtype);
    initialize_parameter(*p, t, seed);
    p->var = Variable(t, true);
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
  ShardSpec whole{global_shape, {}};
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
