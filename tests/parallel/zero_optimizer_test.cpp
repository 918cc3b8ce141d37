// ZeroOptimizer under mpirun (2, 3 and 4 ranks, the data-parallel group = the
// world), stages 1–3, against optim::AdamW on one rank fed the sum of every
// rank's gradients: parameters whose row count does not divide by the group
// size, with fewer rows than ranks (empty shards), a vector and a scalar, over
// two micro-batches and two steps, in f32 and f64 master weights. The
// gradient's sum of squares is the full gradient's, counted once.
#include "trident/parallel/zero/zero_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "trident/autograd/autograd.h"
#include "trident/dist/mpi_communicator.h"

namespace trident::parallel {
namespace {

namespace ag = trident::autograd;

Tensor random(const Shape& s, DType dtype, std::uint64_t seed) {
  std::mt19937_64 gen(seed);  // same seed → same tensor on every rank
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(static_cast<std::size_t>(s.numel()));
  for (double& x : v) x = d(gen);
  return Tensor::from_vector<double>(std::move(v), s).to(dtype);
}

struct Params {
  std::vector<nn::Parameter> storage;
  std::vector<nn::Parameter*> list;
  explicit Params(DType dtype) {
    // rows: 5 (uneven over 2, 3, 4), 1 (empty shards), 7 (a bias), a scalar.
    const std::vector<Shape> shapes{Shape{5, 3}, Shape{1, 4}, Shape{7}, Shape{}};
    storage.reserve(shapes.size());
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      nn::Parameter p;
      p.name = fmt::format("p{}", i);
      p.global_shape = shapes[i];
      p.weight_decay = i < 2;
      p.var = ag::Variable(random(shapes[i], dtype, 100 + i), true);
      p.var.set_name(p.name);
      storage.push_back(std::move(p));
    }
    for (auto& p : storage) list.push_back(&p);
  }
};

// The gradient rank r's micro-batch k contributes to parameter i.
Tensor grad_of(const nn::Parameter& p, std::size_t i, int r, int k, DType dtype) {
  return random(p.global_shape, dtype, 1000 * (i + 1) + 10 * static_cast<std::uint64_t>(r) + static_cast<std::uint64_t>(k));
}

// Parameter i is reached by rank r's loss (all but p1 on even ranks: an expert no token of theirs chose).
bool reached(std::size_t i, int r, bool partial) { return !partial || i != 1 || r % 2 == 1; }

// loss = Σ_i sum(p_i ⊙ G_i): dloss/dp_i = G_i.
void backward_with(const std::vector<nn::Parameter*>& ps, int r, int k, DType dtype, bool partial = false) {
  ag::Variable loss;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (!reached(i, r, partial)) continue;
    ag::Variable term = ag::sum(ag::mul(ps[i]->var, ag::Variable(grad_of(*ps[i], i, r, k, dtype), false)));
    loss = loss.defined() ? ag::add(loss, term) : term;
  }
  loss.backward();
}

void expect_zero_matches_adamw(int stage, DType dtype, bool partial = false) {
  auto world = dist::mpi_world(60.0);
  const int d = world->size(), r = world->rank();
  const optim::AdamWOptions options{0.9, 0.95, 1e-8, 0.1};
  const int micro_batches = 2, steps = 2;
  const double lr = 1e-2, grad_scale = 0.5;

  // Reference: one rank, the full gradient summed over ranks and micro-batches.
  Params ref(dtype);
  optim::AdamW adamw(ref.list, options);
  std::vector<double> ref_sumsq;
  for (int s = 0; s < steps; ++s) {
    adamw.zero_grad();
    for (int rr = 0; rr < d; ++rr)
      for (int k = 0; k < micro_batches; ++k) backward_with(ref.list, rr, k, dtype, partial);
    ref_sumsq.push_back(optim::grad_sum_of_squares(ref.list));
    adamw.step(lr, grad_scale);
  }

  Params mine(dtype);
  ZeroOptimizer zero(stage, mine.list, world, options);
  for (int s = 0; s < steps; ++s) {
    zero.zero_grad();
    for (int k = 0; k < micro_batches; ++k) {
      zero.gather(mine.list);
      backward_with(mine.list, r, k, dtype, partial);
      zero.release(mine.list);
      zero.reduce_gradients(k + 1 == micro_batches);
    }
    const double sumsq = zero.grad_sum_of_squares(mine.list);
    EXPECT_NEAR(sumsq, ref_sumsq[static_cast<std::size_t>(s)], 1e-5 * ref_sumsq[static_cast<std::size_t>(s)])
        << "stage " << stage << " step " << s + 1;
    zero.step(lr, grad_scale);
  }
  zero.gather(mine.list);
  for (std::size_t i = 0; i < mine.list.size(); ++i) {
    const auto got = mine.list[i]->var.data().to_vector<double>();
    const auto want = ref.list[i]->var.data().to_vector<double>();
    ASSERT_EQ(got.size(), want.size()) << mine.list[i]->name;
    for (std::size_t j = 0; j < got.size(); ++j) {
      EXPECT_NEAR(got[j], want[j], dtype == DType::f64 ? 1e-12 : 1e-6)
          << "stage " << stage << ", " << mine.list[i]->name << "[" << j << "] on rank " << r;
    }
  }
  zero.release(mine.list);
}

TEST(ZeroOptimizer, Stage1MatchesAdamW) { expect_zero_matches_adamw(1, DType::f32); }
TEST(ZeroOptimizer, Stage2MatchesAdamW) { expect_zero_matches_adamw(2, DType::f32); }
TEST(ZeroOptimizer, Stage3MatchesAdamW) { expect_zero_matches_adamw(3, DType::f32); }
// f64 master weights (ops::adamw_step supports them): stage 1 must reduce in the parameter's dtype.
// A parameter that some ranks' losses never reach (undefined gradients there, defined elsewhere) gets
// the sum of the others' gradients, as on one process; with one rank, it is not reached at all and the
// optimisers both take its gradient as zero.
TEST(ZeroOptimizer, AParameterSomeRanksNeverReachMatchesAdamW) {
  for (int stage = 1; stage <= 3; ++stage) expect_zero_matches_adamw(stage, DType::f64, true);
}

TEST(ZeroOptimizer, Stage1MatchesAdamWInF64) { expect_zero_matches_adamw(1, DType::f64); }
TEST(ZeroOptimizer, Stage2MatchesAdamWInF64) { expect_zero_matches_adamw(2, DType::f64); }
TEST(ZeroOptimizer, Stage3MatchesAdamWInF64) { expect_zero_matches_adamw(3, DType::f64); }

}  // namespace
}  // namespace trident::parallel
