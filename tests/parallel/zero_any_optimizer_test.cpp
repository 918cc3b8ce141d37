// ZeroOptimizer shards any registered optimizer (optim/registry.h): under
// mpirun (2 and 3 ranks), stages 1–3 with every entry of the registry — and
// with a rule that needs a sum over the whole parameter, as LAMB's trust
// ratio does (StepArgs::sum_over_pieces) — against optim::RuleOptimizer on one
// rank fed the sum of every rank's gradients. Rows that do not divide by the
// group size, a parameter with fewer rows than ranks and a scalar, in f64.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "trident/dist/mpi_communicator.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/optimizer.h"
#include "trident/optim/optimizer.h"
#include "trident/parallel/zero/zero_optimizer.h"

namespace trident::parallel {
namespace {

// Normalised gradient descent: p -= lr · g / ‖g‖, ‖g‖ over the whole parameter (its pieces summed).
struct NormalizedOptions {};
const optim::OptimizerDef& normalized_sgd() {
  static const optim::OptimizerDef def = [] {
    optim::OptimizerDef d;
    d.name = "normalized_sgd";
    d.step = [](const optim::Method&, std::span<const optim::ParamUpdate> updates, const optim::StepArgs& a) {
      std::vector<double> sumsq;
      for (const optim::ParamUpdate& u : updates) sumsq.push_back(ops::sum_of_squares(*u.grad));
      a.sum_over_pieces(sumsq);
      for (std::size_t i = 0; i < updates.size(); ++i) {
        const double norm = std::sqrt(sumsq[i]) * a.grad_scale;
        ops::add_(*updates[i].data, *updates[i].grad, -a.lr * a.grad_scale / (norm + 1e-12));
      }
    };
    return d;
  }();
  return def;
}

Tensor uniform(const Shape& s, std::uint64_t seed) {
  std::mt19937_64 gen(seed);  // the same on every rank
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(static_cast<std::size_t>(s.numel()));
  for (double& x : v) x = d(gen);
  return Tensor::from_vector<double>(std::move(v), s);
}

std::vector<nn::Parameter> make_params() {
  const std::vector<Shape> shapes{Shape{7, 2}, Shape{1, 3}, Shape{}};
  std::vector<nn::Parameter> out(shapes.size());
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    out[i].name = fmt::format("q{}", i);
    out[i].global_shape = shapes[i];
    out[i].weight_decay = i != 1;
    out[i].var = autograd::Variable(uniform(shapes[i], 7 + i), true);
  }
  return out;
}

std::vector<nn::Parameter*> pointers(std::vector<nn::Parameter>& ps) {
  std::vector<nn::Parameter*> out;
  for (nn::Parameter& p : ps) out.push_back(&p);
  return out;
}

// Rank r's gradient of parameter i at step s.
Tensor grad_of(const nn::Parameter& p, std::size_t i, int r, int s) {
  return uniform(p.global_shape, 500 + 100 * i + 10 * static_cast<std::uint64_t>(s) + static_cast<std::uint64_t>(r));
}

void expect_zero_matches(int stage, const optim::Method& method) {
  auto world = dist::mpi_world(60.0);
  const int d = world->size();
  const int steps = 3;
  const double lr = 0.05, grad_scale = 0.5;
  std::vector<nn::Parameter> ref = make_params(), mine = make_params();
  std::vector<nn::Parameter*> ref_list = pointers(ref), mine_list = pointers(mine);
  optim::RuleOptimizer whole(ref_list, method);
  ZeroOptimizer zero(stage, mine_list, world, method);
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < ref.size(); ++i) {
      Tensor sum = grad_of(ref[i], i, 0, s);
      for (int r = 1; r < d; ++r) ops::add_(sum, grad_of(ref[i], i, r, s));
      ref[i].var.set_grad(sum);
    }
    whole.step(lr, grad_scale);
    zero.zero_grad();
    zero.gather(mine_list);
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i].var.set_grad(grad_of(mine[i], i, world->rank(), s));
    zero.release(mine_list);
    zero.reduce_gradients(true);
    zero.step(lr, grad_scale);
  }
  zero.gather(mine_list);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const auto got = mine[i].var.data().to_vector<double>(), want = ref[i].var.data().to_vector<double>();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t j = 0; j < got.size(); ++j)
      EXPECT_NEAR(got[j], want[j], 1e-12) << method.def().name << ", stage " << stage << ", " << mine[i].name << "[" << j << "]";
  }
  zero.release(mine_list);
}

TEST(ZeroAnyOptimizer, EveryRegisteredOptimizerMatchesItsReplicatedForm) {
  const optim::Settings settings = {
      {"betas", {0.9, 0.95}}, {"eps", {1e-8}}, {"weight_decay", {0.1}}, {"momentum", {0.9}}};
  for (const optim::OptimizerDef& def : optim::optimizers()) {
    for (int stage = 1; stage <= 3; ++stage) expect_zero_matches(stage, def.from_settings(settings));
  }
}

TEST(ZeroAnyOptimizer, ARuleSummingOverTheWholeParameterMatches) {
  for (int stage = 1; stage <= 3; ++stage) expect_zero_matches(stage, optim::Method(normalized_sgd(), NormalizedOptions{}));
}

}  // namespace
}  // namespace trident::parallel
