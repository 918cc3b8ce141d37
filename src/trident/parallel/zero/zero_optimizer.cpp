#include "trident/parallel/zero/zero_optimizer.h"

#include "trident/core/memory.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/optimizer.h"

namespace trident::parallel {

namespace {
Shape rows_shape(const Shape& full, std::int64_t rows) {
  std::vector<std::int64_t> dims(full.begin(), full.end());
  if (dims.empty()) dims.push_back(1);
  dims[0] = rows;
  return Shape(dims);
}
}  // namespace

ZeroOptimizer::ZeroOptimizer(int stage, std::vector<nn::Parameter*> params, std::shared_ptr<dist::Communicator> dp,
                             optim::Method method)
    : ZeroOptimizer(stage, std::vector<ZeroGroup>{{std::move(params), std::move(dp)}}, std::move(method)) {}

namespace {
std::vector<nn::Parameter*> all_params(const std::vector<ZeroGroup>& groups) {
  std::vector<nn::Parameter*> out;
  for (const ZeroGroup& g : groups) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}
}  // namespace

ZeroOptimizer::ZeroOptimizer(int stage, std::vector<ZeroGroup> groups, optim::Method method)
    : Optimizer(all_params(groups)), stage_(stage), method_(std::move(method)) {
  TRIDENT_CHECK(stage >= 1 && stage <= 3, "dist.zero_stage must be 0, 1, 2 or 3, got {}", stage);
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    ZeroGroup& g = groups[gi];
    groups_.push_back(g.dp);
    const std::int64_t d = g.dp->size(), r = g.dp->rank();
    for (nn::Parameter* p : g.params) {
      TRIDENT_CHECK(p->var.defined(), "ZeRO: parameter '{}' is not initialised", p->name);
      Entry e;
      e.param = p;
      e.dp = g.dp.get();
      e.group = gi;
      e.full_shape = p->var.shape();
      e.rows = e.full_shape.rank() ? e.full_shape[0] : 1;
      e.row_size = e.rows ? p->var.numel() / e.rows : 0;
      e.chunk_rows = (e.rows + d - 1) / d;
      e.begin = std::min(r * e.chunk_rows, e.rows);
      e.end = std::min((r + 1) * e.chunk_rows, e.rows);
      const DType dt = p->var.dtype();
      const Device dev = p->var.device();
      if (stage_ >= 2) {  // stage 1 reduces into the owned rows of the full gradient instead
        MemoryCategoryScope scope(MemoryCategory::gradients);
        e.grad_shard = Tensor::zeros({e.chunk_rows * e.row_size}, dt, dev);
      }
      {
        MemoryCategoryScope scope(MemoryCategory::optimizer);
        for (const optim::StateSpec& spec : method_.def().states)
          e.state.push_back(Tensor::zeros({(e.end - e.begin) * e.row_size}, spec.dtype_for(dt), dev));
      }
      if (stage_ == 3) {
        MemoryCategoryScope scope(MemoryCategory::parameters);
        e.param_shard = p->var.data().flatten().slice0(e.begin * e.row_size, e.end * e.row_size).clone()
                            .view(rows_shape(e.full_shape, e.end - e.begin));
        p->var.reset_data(Tensor::empty({0}, dt, dev));  // the full tensor is freed; gather() brings it back
      }
      index_[p] = entries_.size();
      entries_.push_back(std::move(e));
    }
  }
}

ZeroOptimizer::Entry& ZeroOptimizer::entry(const nn::Parameter& p) {
  auto it = index_.find(&p);
  TRIDENT_CHECK(it != index_.end(), "ZeRO: parameter '{}' is not managed by this optimizer", p.name);
  return entries_[it->second];
}
const ZeroOptimizer::Entry& ZeroOptimizer::entry(const nn::Parameter& p) const {
  return const_cast<ZeroOptimizer*>(this)->entry(p);
}

std::pair<std::int64_t, std::int64_t> ZeroOptimizer::owned_rows(const nn::Parameter& p) const {
  const Entry& e = entry(p);
  return {e.begin, e.end};
}

const Tensor& ZeroOptimizer::parameter_shard(const nn::Parameter& p) const { return entry(p).param_shard; }

void ZeroOptimizer::zero_grad() {
  for (Entry& e : entries_) {
    if (stage_ == 1) {
      e.param->var.zero_grad();
    } else {
      e.grad_shard.fill_zero();
      e.param->var.set_grad(Tensor());
    }
  }
}

Tensor ZeroOptimizer::owned_grad(const Entry& e) const {
  const std::int64_t n = (e.end - e.begin) * e.row_size;
  if (stage_ >= 2) return e.grad_shard.slice0(0, n);
  const Tensor& g = e.param->var.grad();
  if (!g.defined()) return Tensor();
  return g.flatten().slice0(e.begin * e.row_size, e.end * e.row_size);
}

void ZeroOptimizer::reduce_scatter_into_shard(Entry& e, const Tensor& full_grad) {
  const std::int64_t d = e.dp->size();
  // The parameter's (master) dtype, the same on every rank: grad_shard exists
  // only from stage 2, and an undefined tensor's dtype says nothing.
  const DType dt = e.param->var.dtype();
  const Device dev = e.param->var.device();
  Tensor padded = Tensor::empty({d * e.chunk_rows * e.row_size}, dt, dev);
  const std::int64_t n = e.rows * e.row_size;
  if (full_grad.defined()) {
    padded.slice0(0, n).copy_from(full_grad.flatten().to(dt));
  } else {
    padded.slice0(0, n).fill_zero();  // an unused parameter still joins the collective
  }
  padded.slice0(n, padded.size(0)).fill_zero();
  Tensor mine = Tensor::empty({e.chunk_rows * e.row_size}, dt, dev);
  e.dp->reduce_scatter(padded, mine, dist::CollectiveOptions{dist::ReduceOp::sum, 0, true})->wait();
  const std::int64_t owned = (e.end - e.begin) * e.row_size;
  if (stage_ >= 2) {
    ops::add_(e.grad_shard, mine);
  } else if (owned > 0 && full_grad.defined()) {
    // Stage 1: the reduced rows replace this rank's rows of its full gradient.
    full_grad.flatten()
        .slice0(e.begin * e.row_size, e.end * e.row_size)
        .copy_from(mine.slice0(0, owned).to(full_grad.dtype()));
  }
}

void ZeroOptimizer::reduce_gradients(bool last) {
  if (stage_ == 1 && !last) return;  // stage 1 accumulates full gradients locally
  for (Entry& e : entries_) {
    // Stage 1 keeps the reduced rows in the parameter's gradient: a parameter this rank's loss did not
    // reach (others' may have) gets a zero one to hold them (a missing gradient is zero: optim/optimizer.h).
    if (stage_ == 1 && !e.param->var.grad().defined())
      e.param->var.set_grad(Tensor::zeros(e.full_shape, e.param->var.dtype(), e.param->var.device()));
    reduce_scatter_into_shard(e, e.param->var.grad());
    if (stage_ >= 2) e.param->var.set_grad(Tensor());  // keep only the shard
  }
}

double ZeroOptimizer::grad_sum_of_squares(const std::vector<nn::Parameter*>& subset) {
  // Each group's part is a collective over its communicator, run for every group in order (even one
  // holding none of `subset`).
  std::vector<double> local(groups_.size(), 0.0);
  for (const nn::Parameter* p : subset) {
    const Entry& e = entry(*p);
    const Tensor g = owned_grad(e);
    if (g.defined() && g.numel() > 0) local[e.group] += ops::sum_of_squares(g);
  }
  double total = 0;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi)
    total += groups_[gi]->all_reduce_scalar(local[gi], dist::ReduceOp::sum);
  return total;
}

Tensor ZeroOptimizer::all_gather_rows(const Entry& e, const Tensor& owned) const {
  const std::int64_t d = e.dp->size();
  const DType dt = owned.dtype();
  Tensor chunk = Tensor::zeros({e.chunk_rows * e.row_size}, dt, owned.device());
  const std::int64_t n = owned.numel();
  if (n) chunk.slice0(0, n).copy_from(owned.flatten());
  Tensor all = Tensor::empty({d * e.chunk_rows * e.row_size}, dt, owned.device());
  e.dp->all_gather(chunk, all, dist::CollectiveOptions{dist::ReduceOp::sum, 0, true})->wait();
  return all.slice0(0, e.rows * e.row_size).view(e.full_shape);
}

void ZeroOptimizer::sum_over_groups(const std::vector<Entry*>& updated, std::span<double> values) const {
  // Every entry joins its group's sums (a rank owning no rows of it adds zero), so each rank makes the
  // same collectives whatever it owns.
  std::vector<double> sums(entries_.size(), 0.0);
  for (std::size_t i = 0; i < updated.size(); ++i) sums[index_.at(updated[i]->param)] = values[i];
  for (std::size_t k = 0; k < entries_.size(); ++k) sums[k] = entries_[k].dp->all_reduce_scalar(sums[k]);
  for (std::size_t i = 0; i < updated.size(); ++i) values[i] = sums[index_.at(updated[i]->param)];
}

void ZeroOptimizer::step(double lr, double grad_scale) {
  ++step_;
  // The rule over every owned (non-empty) piece, then the updated rows gathered back (stages 1, 2).
  std::vector<Tensor> masters, grads;
  std::vector<Entry*> updated;
  masters.reserve(entries_.size());
  grads.reserve(entries_.size());
  for (Entry& e : entries_) {
    const std::int64_t n = (e.end - e.begin) * e.row_size;
    if (n == 0) continue;
    masters.push_back(stage_ == 3 ? e.param_shard.flatten()
                                  : e.param->var.data().flatten().slice0(e.begin * e.row_size, e.end * e.row_size));
    Tensor grad = owned_grad(e);
    if (!grad.defined()) grad = Tensor::zeros({n}, masters.back().dtype(), masters.back().device());  // missing = zero
    grads.push_back(std::move(grad));
    updated.push_back(&e);
  }
  std::vector<optim::ParamUpdate> updates;
  for (std::size_t i = 0; i < updated.size(); ++i) {
    updates.push_back({updated[i]->param, &masters[i], &grads[i], updated[i]->state, nullptr});
  }
  const optim::StepArgs args{lr, grad_scale, step_, fresh_,
                             [&](std::span<double> values) { sum_over_groups(updated, values); }};
  method_.def().step(method_, updates, args);
  fresh_ = false;
  if (stage_ < 3) {
    for (Entry& e : entries_) {
      const Tensor data = e.param->var.data();
      Tensor owned = data.flatten().slice0(e.begin * e.row_size, e.end * e.row_size);
      data.copy_from(all_gather_rows(e, owned));
      e.param->var.mark_data_changed();
    }
  }
}

void ZeroOptimizer::gather(const std::vector<nn::Parameter*>& params) {
  if (stage_ != 3) return;
  for (nn::Parameter* p : params) {
    Entry& e = entry(*p);
    if (e.gathered++ == 0) {
      MemoryCategoryScope scope(MemoryCategory::parameters);
      p->var.reset_data(all_gather_rows(e, e.param_shard).clone());
    }
  }
}

void ZeroOptimizer::release(const std::vector<nn::Parameter*>& params) {
  if (stage_ != 3) return;
  for (nn::Parameter* p : params) {
    Entry& e = entry(*p);
    TRIDENT_DCHECK(e.gathered > 0, "release without gather of {}", p->name);
    if (--e.gathered == 0) p->var.reset_data(Tensor::empty({0}, e.param_shard.dtype(), e.param_shard.device()));
  }
}

std::map<std::string, ZeroOptimizer::Shard> ZeroOptimizer::owned_state() const {
  std::map<std::string, Shard> out;
  const std::vector<optim::StateSpec>& specs = method_.def().states;
  for (const Entry& e : entries_) {
    if (e.end <= e.begin) continue;
    const Shape shape = rows_shape(e.full_shape, e.end - e.begin);
    for (std::size_t k = 0; k < specs.size(); ++k)
      out[specs[k].name + "/" + e.param->name] = Shard{e.state[k].view(shape), e.begin};
    if (stage_ == 3) out["model/" + e.param->name] = Shard{e.param_shard, e.begin};
  }
  return out;
}

void ZeroOptimizer::load_owned_state(const ReadRows& read) {
  const std::vector<optim::StateSpec>& specs = method_.def().states;
  for (Entry& e : entries_) {
    const std::int64_t rows = e.end - e.begin;
    if (rows <= 0) continue;
    const Shape shape = rows_shape(e.full_shape, rows);
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const Tensor dst = e.state[k].view(shape);
      dst.copy_from(read(specs[k].name + "/" + e.param->name, e.begin, rows, DType::f32).to(dst.dtype()));
    }
    if (stage_ == 3) {
      e.param_shard.copy_from(read("model/" + e.param->name, e.begin, rows, DType::f32).to(e.param_shard.dtype()));
    }
  }
  fresh_ = false;
}

std::map<std::string, Tensor> ZeroOptimizer::state() const {
  std::map<std::string, Tensor> out;
  for (auto& [key, shard] : owned_state()) out.emplace(key, shard.data);
  return out;
}

void ZeroOptimizer::set_method(optim::Method method) {
  TRIDENT_CHECK(&method.def() == &method_.def(), "ZeRO optimizer: set_method from {} to {}: the state would not fit",
                method_.def().name, method.def().name);
  method_ = std::move(method);
}

void ZeroOptimizer::load_state(const std::map<std::string, Tensor>& state) {
  load_owned_state([&](const std::string& key, std::int64_t, std::int64_t rows, DType) {
    auto it = state.find(key);
    TRIDENT_CHECK(it != state.end(), "ZeRO optimizer state: missing '{}'", key);
    const Tensor& t = it->second;
    TRIDENT_CHECK((t.rank() ? t.shape()[0] : 1) == rows,
                  "ZeRO optimizer state '{}' has shape {}, expected this rank's {} rows", key, t.shape(), rows);
    return t;
  });
}

}  // namespace trident::parallel
