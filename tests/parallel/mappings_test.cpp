// Tensor-parallel region operators under mpirun (2 and 4 ranks, the TP group =
// the world): a column-parallel and a row-parallel linear layer built from them,
// and the Megatron MLP (column → GELU → row), give the unsharded layer's output
// and gradients — input gradient and each rank's weight-shard gradient.
#include "trident/parallel/tensor/mappings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "trident/autograd/autograd.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/ops/shape.h"

namespace trident::parallel {
namespace {

namespace ag = trident::autograd;

Tensor random(Shape s, std::uint64_t seed) {
  std::mt19937_64 gen(seed);  // same seed → same tensor on every rank
  std::uniform_real_distribution<double> d(-1, 1);
  Tensor t = Tensor::empty(std::move(s), DType::f64);
  for (double& x : t.span<double>()) x = d(gen);
  return t;
}

double max_rel(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]) / std::max(1.0, std::fabs(y[i])));
  return worst;
}

// Rows [r·n/t, (r+1)·n/t) of a [n, m] weight (the column-parallel shard of an [out, in] weight).
Tensor rows_of(const Tensor& w, int r, int t) { return w.slice0(w.size(0) / t * r, w.size(0) / t * (r + 1)).clone(); }

class TensorParallel : public ::testing::Test {
 protected:
  void SetUp() override { tp_ = dist::mpi_world(60.0); }
  TpGroup tp_;
};

TEST_F(TensorParallel, ColumnParallelLinearMatchesTheFullLayer) {
  const int r = tp_->rank(), t = tp_->size();
  const Tensor x0 = random({2, 3, 8}, 1), w0 = random({4 * t, 8}, 2), g0 = random({2, 3, 4 * t}, 3);
  // Reference: the full layer on every rank.
  Variable x_full(x0.clone(), true), w_full(w0.clone(), true);
  Variable y_full = ag::linear(x_full, w_full, Variable());
  ag::sum(ag::mul(y_full, Variable(g0, false))).backward();
  // Sharded: copy_to_tp → linear with this rank's output rows → gather.
  Variable x(x0.clone(), true), w(rows_of(w0, r, t), true);
  Variable y = gather_from_tp(ag::linear(copy_to_tp(x, tp_), w, Variable()), tp_);
  ag::sum(ag::mul(y, Variable(g0, false))).backward();
  EXPECT_LE(max_rel(y.data(), y_full.data()), 1e-12);
  EXPECT_LE(max_rel(x.grad(), x_full.grad()), 1e-12);
  EXPECT_LE(max_rel(w.grad(), rows_of(w_full.grad(), r, t)), 1e-12);
}

TEST_F(TensorParallel, RowParallelLinearMatchesTheFullLayer) {
  const int r = tp_->rank(), t = tp_->size();
  const Tensor x0 = random({5, 4 * t}, 4), w0 = random({6, 4 * t}, 5), b0 = random({6}, 6), g0 = random({5, 6}, 7);
  Variable x_full(x0.clone(), true), w_full(w0.clone(), true), b_full(b0.clone(), true);
  Variable y_full = ag::linear(x_full, w_full, b_full);
  ag::sum(ag::mul(y_full, Variable(g0, false))).backward();
  // Sharded: split the input's last dim, multiply by this rank's input columns, reduce, add the bias once.
  const Tensor w_cols = split_dim(w0, -1, r, t);
  Variable x(x0.clone(), true), w(w_cols, true), b(b0.clone(), true);
  Variable y = ag::bias_add(reduce_from_tp(ag::linear(scatter_to_tp(x, tp_), w, Variable()), tp_), b);
  ag::sum(ag::mul(y, Variable(g0, false))).backward();
  EXPECT_LE(max_rel(y.data(), y_full.data()), 1e-12);
  EXPECT_LE(max_rel(x.grad(), x_full.grad()), 1e-12);
  EXPECT_LE(max_rel(w.grad(), split_dim(w_full.grad(), -1, r, t)), 1e-12);
  EXPECT_LE(max_rel(b.grad(), b_full.grad()), 1e-12);
}

TEST_F(TensorParallel, MegatronMlpMatchesTheFullMlp) {
  const int r = tp_->rank(), t = tp_->size();
  const Tensor x0 = random({3, 8}, 8), w1 = random({4 * t, 8}, 9), w2 = random({8, 4 * t}, 10), g0 = random({3, 8}, 11);
  Variable x_full(x0.clone(), true), a_full(w1.clone(), true), b_full(w2.clone(), true);
  Variable y_full = ag::linear(ag::gelu_tanh(ag::linear(x_full, a_full, Variable())), b_full, Variable());
  ag::sum(ag::mul(y_full, Variable(g0, false))).backward();
  // Column (fc1, rows) → GELU on the split activations → row (fc2, columns): one all-reduce each way.
  Variable x(x0.clone(), true), a(rows_of(w1, r, t), true), b(split_dim(w2, -1, r, t), true);
  tp_->reset_traffic();
  Variable h = ag::gelu_tanh(ag::linear(copy_to_tp(x, tp_), a, Variable()));
  Variable y = reduce_from_tp(ag::linear(h, b, Variable()), tp_);
  ag::sum(ag::mul(y, Variable(g0, false))).backward();
  EXPECT_LE(max_rel(y.data(), y_full.data()), 1e-12);
  EXPECT_LE(max_rel(x.grad(), x_full.grad()), 1e-12);
  EXPECT_LE(max_rel(a.grad(), rows_of(a_full.grad(), r, t)), 1e-12);
  EXPECT_LE(max_rel(b.grad(), split_dim(b_full.grad(), -1, r, t)), 1e-12);
  // Two all-reduces of the [3, 8] activation: reduce_from_tp forward, copy_to_tp backward.
  EXPECT_EQ(tp_->traffic().all_reduce_bytes, 2 * 3 * 8 * 8);
}

TEST_F(TensorParallel, IndivisibleLastDimensionIsAnError) {
  if (tp_->size() == 1) GTEST_SKIP();
  Variable x(random({2, 3 * tp_->size() + 1}, 12), true);
  EXPECT_THROW(scatter_to_tp(x, tp_), Error);
}

}  // namespace
}  // namespace trident::parallel
