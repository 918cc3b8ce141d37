// LiBai's custom parallel network in C++: a model that is in no registry, built by the program from
// column- and row-parallel linears and plain layers, trained tensor parallel 2 × data parallel 2, and
// checked against the same model trained by one process.
//
//   mpirun -n 4 ./libai_custom        (tp = 2 when the rank count is even, dp = the rest)
//
// Every rank also trains the single-process model (it is tiny) on the whole global batch, then
// asserts that each step's loss and, at the end, each of its parameter shards are within 1e-5 of it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "trident/autograd/autograd.h"
#include "trident/core/rng.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/dist/self_communicator.h"
#include "trident/nn/nn.h"
#include "trident/optim/optimizer.h"
#include "trident/parallel/data/grad_sync.h"
#include "trident/train/parallel_model.h"

using namespace trident;
using autograd::Variable;

namespace {

constexpr std::int64_t kIn = 32, kHidden = 64, kClasses = 4, kGlobalBatch = 16, kSteps = 20;

// x + fc2(gelu(fc1(x))), a norm and a classifier: Megatron's MLP split over the tensor-parallel group
// (fc1 column-parallel: each rank holds kHidden/t outputs; fc2 row-parallel: its kHidden/t inputs, the
// output summed over the group), the rest replicated. `tp` empty: the whole model in one process.
class ResidualMLP : public nn::Module {
 public:
  explicit ResidualMLP(const nn::TensorParallel& tp) : nn::Module("") {
    fc1_ = &add_module(std::make_unique<nn::ColumnParallelLinear>("fc1", nn::LinearOptions{kIn, kHidden}, tp));
    fc2_ = &add_module(std::make_unique<nn::RowParallelLinear>("fc2", nn::LinearOptions{kHidden, kIn}, tp));
    norm_ = &add_module(std::make_unique<nn::LayerNorm>("norm", kIn, 1e-5, true, tp));
    head_ = &add_module(std::make_unique<nn::Linear>("head", nn::LinearOptions{kIn, kClasses}, tp));
  }
  // x [B, kIn] → logits [B, kClasses], the same on every tensor-parallel rank.
  Variable forward(const Variable& x, const nn::ForwardContext& ctx) const {
    const Variable h = autograd::add(x, fc2_->forward(autograd::gelu(fc1_->forward(x, ctx)), ctx));
    return head_->forward(norm_->forward(h, ctx), ctx);
  }

 private:
  nn::Linear *fc1_, *fc2_, *head_;
  nn::LayerNorm* norm_;
};

// Rows [first, first + rows) of step `step`'s global batch: x ~ N(0, 1), the class is the largest of
// x's first kClasses features.
std::pair<Tensor, Tensor> batch(std::int64_t step, std::int64_t first, std::int64_t rows) {
  const CounterRng rng(3, "samples");
  std::vector<float> x;
  std::vector<std::int64_t> y;
  for (std::int64_t s = (step - 1) * kGlobalBatch + first; s < (step - 1) * kGlobalBatch + first + rows; ++s) {
    for (std::int64_t f = 0; f < kIn; ++f) x.push_back(static_cast<float>(rng.normal(static_cast<std::uint64_t>(s * kIn + f))));
    const auto row = x.end() - kIn;
    y.push_back(std::max_element(row, row + kClasses) - row);
  }
  return {Tensor::from_vector(x, {rows, kIn}), Tensor::from_vector(y, {rows})};
}

// The loss of `rows` samples as their share of the global batch's mean (their sum / kGlobalBatch).
Variable loss_of(const ResidualMLP& model, std::int64_t step, std::int64_t first, std::int64_t rows) {
  const auto [x, y] = batch(step, first, rows);
  return autograd::cross_entropy(model.forward(Variable(x), nn::ForwardContext{.training = true}), y,
                                 {.normalizer = static_cast<double>(kGlobalBatch)});
}

// The largest difference between this rank's shards and the same boxes of the whole model's parameters.
double max_parameter_difference(ResidualMLP& parallel, ResidualMLP& whole) {
  double worst = 0;
  for (nn::Parameter* p : parallel.parameters()) {
    const Tensor full = whole.find_parameter(p->name)->var.data();
    std::vector<nn::ShardPiece> pieces = p->shard.pieces;
    if (p->shard.is_whole()) pieces = {{std::vector<std::int64_t>(full.rank(), 0), std::vector<std::int64_t>(full.rank(), 0), full.shape()}};
    for (const nn::ShardPiece& piece : pieces) {
      const auto a = nn::copy_box_out(p->var.data(), piece.local_offsets, piece.extent).to_vector<float>();
      const auto b = nn::copy_box_out(full, piece.global_offsets, piece.extent).to_vector<float>();
      for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    }
  }
  return worst;
}

int run() {
  auto world = dist::launched_by_mpi() ? dist::mpi_world() : dist::self_communicator();
  const train::ParallelGroups g = train::make_groups(world, {.tp = world->size() % 2 == 0 ? 2 : 1});
  const bool root = g.is_root();
  if (root) fmt::print("ResidualMLP on {}\n", g.mesh->describe());

  // The user's model on this rank (its tensor-parallel shards), and the single-process one.
  ResidualMLP model(g.tp_size > 1 ? nn::TensorParallel{g.tp} : nn::TensorParallel{});
  ResidualMLP whole(nn::TensorParallel{});
  model.initialize(11);  // counter-based: a shard starts as the slice of the whole model's values
  whole.initialize(11);
  optim::AdamW optimizer(model.parameters(), {.weight_decay = 0.01});
  optim::AdamW whole_optimizer(whole.parameters(), {.weight_decay = 0.01});
  parallel::GradSync data_parallel(model.parameters(), g.dp, {});  // sums gradients over the dp group

  const std::int64_t rows = kGlobalBatch / g.dp_size, first = g.dp_rank * rows;
  double worst_loss = 0, first_loss = 0, last_loss = 0;
  for (std::int64_t step = 1; step <= kSteps; ++step) {
    data_parallel.zero_grad();
    data_parallel.begin_micro_batch(true);
    const Variable loss = loss_of(model, step, first, rows);
    loss.backward();
    data_parallel.finish();
    optimizer.step(1e-2);
    const double global = g.dp->all_reduce_scalar(loss.data().item(), dist::ReduceOp::sum);

    whole_optimizer.zero_grad();
    const Variable reference = loss_of(whole, step, 0, kGlobalBatch);
    reference.backward();
    whole_optimizer.step(1e-2);

    worst_loss = std::max(worst_loss, std::fabs(global - reference.data().item()));
    if (step == 1) first_loss = global;
    last_loss = global;
    if (root && (step == 1 || step % 5 == 0))
      fmt::print("step {:2d}  loss {:.6f}  one process {:.6f}\n", step, global, reference.data().item());
  }
  const double worst_param =
      world->all_reduce_scalar(max_parameter_difference(model, whole), dist::ReduceOp::max);
  worst_loss = world->all_reduce_scalar(worst_loss, dist::ReduceOp::max);
  const bool ok = worst_loss <= 1e-5 && worst_param <= 1e-5 && last_loss < first_loss;
  if (root)
    fmt::print("max |loss - one process| {:.2e}, max |parameter - one process| {:.2e}: {}\n", worst_loss, worst_param,
               ok ? "OK" : "FAIL (more than 1e-5, or the loss did not fall)");
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    const int status = run();
    dist::finalize();
    return status;
  } catch (const std::exception& e) {
    fmt::print(stderr, "libai_custom: {}\n", e.what());
    dist::finalize_and_exit(1);
  }
}
