// GradSync on one rank (the self communicator): the bucket the collective reads
// must hold zeros for a parameter whose lazy zero_grad() no backward overwrote.
#include "trident/parallel/data/grad_sync.h"

#include <gtest/gtest.h>

#include "trident/autograd/autograd.h"
#include "trident/dist/self_communicator.h"

namespace trident::parallel {
namespace {

nn::Parameter parameter(const char* name, std::vector<double> values) {
  nn::Parameter p;
  p.name = name;
  const auto n = static_cast<std::int64_t>(values.size());
  p.global_shape = Shape{n};
  p.var = autograd::Variable(Tensor::from_vector<double>(std::move(values), {n}), true);
  p.var.set_name(name);
  return p;
}

TEST(GradSync, ABucketNeverHoldsAStaleGradientOfAnUnusedParameter) {
  nn::Parameter used = parameter("used", {1, 2}), unused = parameter("unused", {3, 4});
  GradSync sync({&used, &unused}, dist::self_communicator(), GradSyncOptions{});
  auto step = [&](bool touch_unused) {
    sync.begin_micro_batch(true);
    autograd::Variable loss = autograd::sum(autograd::scale(used.var, 2.0));
    if (touch_unused) loss = autograd::add(loss, autograd::sum(autograd::scale(unused.var, 5.0)));
    loss.backward();
    sync.finish();
  };
  step(true);
  const Tensor unused_view = unused.var.grad();  // an alias of the bucket, read without grad()
  EXPECT_EQ(unused_view.to_vector<double>(), (std::vector<double>{5, 5}));
  used.var.zero_grad();  // lazy, as an optimizer's zero_grad() would be
  unused.var.zero_grad();
  step(false);
  EXPECT_EQ(unused_view.to_vector<double>(), (std::vector<double>{0, 0})) << "the reduction read old values";
  EXPECT_EQ(used.var.grad().to_vector<double>(), (std::vector<double>{2, 2}));
}

}  // namespace
}  // namespace trident::parallel
