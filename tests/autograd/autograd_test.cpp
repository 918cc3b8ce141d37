#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "trident/autograd/autograd.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/matmul.h"

namespace trident::autograd {
namespace {

Variable leaf(std::vector<double> v, Shape s) { return Variable(Tensor::from_vector<double>(v, std::move(s)), true); }

TEST(Autograd, ChainRuleAndAccumulationAcrossUses) {
  Variable x = leaf({1, 2, 3}, {3});
  // y = sum(x*x + 3x): dy/dx = 2x + 3; x used three times.
  Variable y = sum(add(mul(x, x), scale(x, 3.0)));
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5, 7, 9}));
}

TEST(Autograd, GradientsAccumulateOverBackwardCalls) {
  Variable x = leaf({1, 2}, {2});
  sum(scale(x, 2.0)).backward();
  sum(scale(x, 5.0)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{7, 7}));
  x.zero_grad();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0}));
}

TEST(Autograd, BackwardWithGivenOutputGradient) {
  Variable x = leaf({1, 2, 3}, {3});
  Variable y = mul(x, x);
  y.backward(Tensor::from_vector<double>({1, 10, 100}, {3}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 40, 600}));
}

TEST(Autograd, NonScalarRootNeedsGradient) {
  Variable x = leaf({1, 2}, {2});
  EXPECT_THROW(mul(x, x).backward(), Error);
}

TEST(Autograd, NoGradRecordsNothing) {
  Variable x = leaf({1, 2}, {2});
  Variable y;
  {
    NoGradGuard guard;
    y = mul(x, x);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(sum(y).backward(), Error);
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  Variable x = leaf({1, 2}, {2});
  Variable y = sum(mul(x, x));
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{4, 8}));
  EXPECT_THROW(y.backward(), Error);
}

TEST(Autograd, InstalledGradBufferIsAccumulatedInPlace) {
  Variable x = leaf({1, 2}, {2});
  Tensor bucket = Tensor::zeros({4}, DType::f64);
  x.set_grad(bucket.view({4}).slice0(2, 4));
  sum(scale(x, 3.0)).backward();
  EXPECT_EQ(bucket.to_vector<double>(), (std::vector<double>{0, 0, 3, 3}));
}

TEST(Autograd, GradReadyHooksFireOncePerBackwardAfterAllContributions) {
  Variable a = leaf({1, 2}, {2});
  Variable b = leaf({3, 4}, {2});
  std::vector<std::string> order;
  std::vector<std::vector<double>> seen;
  a.set_name("a");
  b.set_name("b");
  a.add_grad_ready_hook([&](Variable& v) {
    order.push_back(v.name());
    seen.push_back(v.grad().to_vector<double>());
  });
  b.add_grad_ready_hook([&](Variable& v) { order.push_back(v.name()); });
  // a is used early and late; b only late. a's hook must see the full gradient.
  Variable h = mul(a, a);                 // recorded first
  Variable out = sum(mul(add(h, b), a));  // a used again
  out.backward();
  ASSERT_EQ(order.size(), 2u);
  // d/da [ (a^2 + b) * a ] = 3a^2 + b
  EXPECT_EQ(seen[0], (std::vector<double>{6, 16}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 2}));
}

TEST(Autograd, ARemovedGradReadyHookIsNotCalled) {
  Variable x = leaf({1, 2}, {2});
  int kept = 0, removed = 0;
  x.add_grad_ready_hook([&](Variable&) { ++kept; });
  const int handle = x.add_grad_ready_hook([&](Variable&) { ++removed; });
  sum(x).backward();
  x.remove_grad_ready_hook(handle);
  sum(x).backward();
  EXPECT_EQ(kept, 2);
  EXPECT_EQ(removed, 1);
}

// A backward that throws after a fused op wrote a weight's gradient in place
// (before the weight's accumulator ran) leaves no mark behind: the next
// backward, in which no gradient reaches the weight, does not fire its hook.
TEST(Autograd, AFailedBackwardLeavesNoInPlaceMarkForTheNext) {
  Variable w = leaf({1, 2, 3, 4}, {2, 2});
  int fired = 0;
  w.add_grad_ready_hook([&](Variable&) { ++fired; });
  const Variable x(Tensor::from_vector<double>({0.5, -1, 2, 0.25}, {2, 2}), false);
  // Recorded first, so its backward runs after linear's (which writes w's
  // gradient in place through its WeightGradSink).
  Variable thrown = make_result(w.data().clone(), {w}, "throws", [](const GradContext&) -> std::vector<Tensor> {
    TRIDENT_FAIL("backward failed on purpose");
  });
  Variable loss = add(sum(linear(x, w)), sum(thrown));
  EXPECT_THROW(loss.backward(), Error);
  EXPECT_EQ(fired, 0);
  // A graph that reaches w's accumulator without a gradient for it.
  Variable silent = make_result(w.data().clone(), {w}, "no_grad_for_w",
                                [](const GradContext&) { return std::vector<Tensor>{Tensor()}; });
  sum(silent).backward();
  EXPECT_EQ(fired, 0) << "the failed backward's in-place write must not count for this one";
}

TEST(Autograd, UserDefinedFunctionWithCustomBackward) {
  // f(x) = x^3 with a hand-written backward.
  auto cube = [](const Variable& x) {
    Tensor xd = x.data();
    return make_result(ops::mul(ops::mul(xd, xd), xd), {x}, "cube", [xd](const GradContext& ctx) {
      return std::vector<Tensor>{ops::mul(ctx.grad(), ops::scale(ops::mul(xd, xd), 3.0))};
    });
  };
  Variable x = leaf({1, -2}, {2});
  sum(cube(x)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 12}));
}

TEST(Autograd, MultipleOutputsWithUnusedOutput) {
  Variable x = leaf({1, 2, 3, 4}, {4});
  auto parts = split(x, {1, 3}, 0);
  sum(scale(parts[1], 2.0)).backward();  // parts[0] unused: its gradient is zero
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 2, 2, 2}));
}

// Recomputation: a checkpointed segment gives bit-identical gradients for its
// inputs and for the parameters used inside it, and keeps no graph inside.
TEST(Autograd, CheckpointGivesBitIdenticalGradients) {
  auto make = [] {
    std::vector<double> xv, wv;
    for (int i = 0; i < 12; ++i) xv.push_back(0.1 * i - 0.37);
    for (int i = 0; i < 12; ++i) wv.push_back(0.05 * i * i - 0.2);
    return std::pair{leaf(xv, {3, 4}), leaf(wv, {3, 4})};
  };
  auto segment_with = [](const Variable& w) {
    return [w](const std::vector<Variable>& in) {
      Variable h = mul(in[0], w);
      Variable h2 = add(mul(h, h), scale(in[0], 0.3));
      return std::vector<Variable>{mul(h2, w), scale(h, 2.0)};
    };
  };
  auto [x1, w1] = make();
  auto outs1 = segment_with(w1)({x1});
  sum(add(mul(outs1[0], outs1[0]), outs1[1])).backward();

  auto [x2, w2] = make();
  auto outs2 = checkpoint(segment_with(w2), {x2});
  EXPECT_EQ(outs2[0].grad_fn()->name(), "checkpoint");
  sum(add(mul(outs2[0], outs2[0]), outs2[1])).backward();

  EXPECT_EQ(x1.grad().to_vector<double>(), x2.grad().to_vector<double>());
  EXPECT_EQ(w1.grad().to_vector<double>(), w2.grad().to_vector<double>());
}

TEST(Autograd, CheckpointReachesParametersWhenInputsNeedNoGrad) {
  Variable x(Tensor::from_vector<double>({1, 2}, {2}), false);
  Variable w = leaf({3, 4}, {2});
  auto outs = checkpoint([&](const std::vector<Variable>& in) { return std::vector<Variable>{mul(in[0], w)}; }, {x});
  sum(outs[0]).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{1, 2}));
}

TEST(Autograd, MixedPrecisionCastRoutesGradientToMasterDtype) {
  Variable master = leaf({0.5, 1.5}, {2});
  Variable compute = cast(master, DType::f32);
  sum(mul(compute, compute)).backward();
  EXPECT_EQ(master.grad().dtype(), DType::f64);
  EXPECT_EQ(master.grad().to_vector<double>(), (std::vector<double>{1, 3}));
}

// Gradient-accumulation fusion: linear, matmul and embedding add a leaf
// weight's gradient straight into its .grad. The gradients must equal those
// of the same graph with the weight behind a non-leaf (the unfused path).
TEST(Autograd, FusedWeightGradientsMatchTheUnfusedPath) {
  auto values = [](std::int64_t n, double step) {
    std::vector<double> v;
    for (std::int64_t i = 0; i < n; ++i) v.push_back(std::sin(step * static_cast<double>(i + 1)));
    return v;
  };
  const Tensor ids = Tensor::from_vector<std::int64_t>({2, 0, 2, 5, 1, 2}, {2, 3});
  auto run = [&](bool fused, int backwards) {
    Variable w = leaf(values(6 * 4, 0.7), {6, 4});  // [vocab = out, d]
    Variable x = leaf(values(2 * 3 * 4, 0.3), {2, 3, 4});
    int hooks = 0;
    std::vector<double> seen;
    w.add_grad_ready_hook([&](Variable& v) {
      ++hooks;
      seen = v.grad().to_vector<double>();
    });
    for (int b = 0; b < backwards; ++b) {
      const Variable wv = fused ? w : scale(w, 1.0);
      Variable h = add(embedding(wv, ids), x);                 // tied: lookup ...
      Variable y = linear(h, wv);                              // ... and head, [2, 3, 6]
      Variable z = matmul(y, wv);                              // shared 2-D operand, [2, 3, 4]
      Variable u = matmul(wv, h, false, true);                 // 2-D first operand, [2, 6, 3]
      sum(add(sum(mul(z, z)), sum(mul(u, u)))).backward();
    }
    EXPECT_EQ(hooks, backwards);
    EXPECT_EQ(seen, w.grad().to_vector<double>()) << "the hook must see the complete gradient";
    return std::pair{w.grad().to_vector<double>(), x.grad().to_vector<double>()};
  };
  for (int backwards : {1, 2}) {
    const auto [w_fused, x_fused] = run(true, backwards);
    const auto [w_plain, x_plain] = run(false, backwards);
    ASSERT_EQ(w_fused.size(), w_plain.size());
    for (std::size_t i = 0; i < w_fused.size(); ++i) {
      EXPECT_NEAR(w_fused[i], w_plain[i], 1e-12 * (1 + std::abs(w_plain[i])));
    }
    EXPECT_EQ(x_fused, x_plain);
  }
}

// zero_grad() is lazy: the buffer is kept, the next backward overwrites it
// (the weight-gradient GEMM with beta = 0, AccumulateGrad by copying) and a
// gradient read before any write is zero.
TEST(Autograd, ZeroGradKeepsTheBufferAndTheNextBackwardOverwritesIt) {
  Variable w = leaf({1, 2, 3, 4, 5, 6}, {3, 2});  // a fused weight (linear)
  Variable b = leaf({1, 1, 1}, {3});              // a bias (AccumulateGrad)
  Variable unused = leaf({7, 8}, {2});
  const Variable x(Tensor::from_vector<double>({0.5, -1, 2, 0.25}, {2, 2}), false);
  auto backward = [&](bool touch_unused) {
    Variable y = linear(x, w, b);  // [2, 3]
    Variable loss = sum(mul(y, y));
    if (touch_unused) loss = add(loss, sum(unused));
    loss.backward();
  };
  backward(true);
  const std::vector<double> w_once = w.grad().to_vector<double>(), b_once = b.grad().to_vector<double>();
  const Tensor w_buffer = w.grad(), b_buffer = b.grad();
  backward(true);  // accumulates
  EXPECT_NE(w.grad().to_vector<double>(), w_once);
  for (Variable* v : {&w, &b, &unused}) v->zero_grad();
  backward(false);
  EXPECT_TRUE(w.grad().is_same(w_buffer));
  EXPECT_TRUE(b.grad().is_same(b_buffer));
  EXPECT_EQ(w.grad().to_vector<double>(), w_once);
  EXPECT_EQ(b.grad().to_vector<double>(), b_once);
  EXPECT_EQ(unused.grad().to_vector<double>(), (std::vector<double>{0, 0}));
  // Read before the backward: zeroed then, and the backward adds onto the zeros.
  w.zero_grad();
  EXPECT_EQ(w.grad().to_vector<double>(), std::vector<double>(6, 0.0));
  b.zero_grad();
  backward(false);
  EXPECT_EQ(w.grad().to_vector<double>(), w_once);
  EXPECT_EQ(b.grad().to_vector<double>(), b_once);
  // An installed buffer replaces a stale one as it is.
  w.zero_grad();
  w.set_grad(Tensor::from_vector<double>({1, 1, 1, 1, 1, 1}, {3, 2}));
  EXPECT_EQ(w.grad().to_vector<double>(), std::vector<double>(6, 1.0));
}

// Mixed precision: the weight gradient of a bf16 copy of an f32 master is the
// f32 GEMM output, added into the master's gradient without a bf16 rounding —
// also into an installed buffer (data parallelism's bucket views).
TEST(Autograd, CastOfMasterWeightAccumulatesItsGradientInF32) {
  auto random = [](Shape shape, std::uint64_t seed) {
    Tensor t = Tensor::empty(std::move(shape), DType::f32);
    std::uint64_t state = seed;
    for (float& v : t.span<float>()) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<float>(static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5);
    }
    return t;
  };
  Variable master(random({5, 7}, 1), true);
  Tensor bucket = Tensor::zeros({40}, DType::f32);
  master.set_grad(bucket.slice0(5, 40).view({5, 7}));
  const Tensor xb = random({3, 7}, 2).to(DType::bf16);
  Variable y = linear(Variable(xb, false), cast(master, DType::bf16));  // [3, 5]
  const Tensor gb = random({3, 5}, 3).to(DType::bf16);
  y.backward(gb);
  y = linear(Variable(xb, false), cast(master, DType::bf16));
  y.backward(gb);

  Tensor expected = Tensor::zeros({5, 7}, DType::f32);
  ops::matmul_into(gb, xb, expected, true, false, 1.0, 0.0);  // dW = gᵀ·x in f32
  ops::matmul_into(gb, xb, expected, true, false, 1.0, 1.0);
  EXPECT_EQ(master.grad().to_vector<float>(), expected.to_vector<float>());
  EXPECT_EQ(bucket.slice0(0, 5).to_vector<float>(), std::vector<float>(5, 0.0f));
  // The unfused route rounds the product to bf16 first: a different (coarser) answer.
  EXPECT_NE(ops::cast(ops::matmul(gb, xb, true, false), DType::f32).to_vector<float>(),
            master.grad().to_vector<float>());
}

// cast_cached keeps a leaf's converted data until the data changes: reused
// while unchanged, converted afresh after set_data or mark_data_changed.
TEST(Autograd, CastCachedReusesTheCopyUntilTheDataChanges) {
  Variable master(Tensor::from_vector<float>({0.5f, 0.25f, 0.375f}, {3}), true);  // exact in bf16
  const Tensor c1 = cast_cached(master, DType::bf16).data();
  EXPECT_TRUE(cast_cached(master, DType::bf16).data().is_same(c1));
  EXPECT_FALSE(cast_cached(master, DType::f16).data().is_same(c1));  // another dtype: converted (and kept instead)

  master.data().span<float>()[0] = 4.0f;
  master.mark_data_changed();
  EXPECT_EQ(cast_cached(master, DType::bf16).data().to_vector<float>(), (std::vector<float>{4.0f, 0.25f, 0.375f}));
  master.set_data(Tensor::from_vector<float>({-1.0f, -2.0f, -3.0f}, {3}));
  EXPECT_EQ(cast_cached(master, DType::bf16).data().to_vector<float>(), (std::vector<float>{-1.0f, -2.0f, -3.0f}));
  // Gradients still reach the master, in its dtype.
  sum(cast_cached(master, DType::bf16)).backward();
  EXPECT_EQ(master.grad().to_vector<float>(), (std::vector<float>{1.0f, 1.0f, 1.0f}));
}

// The tests run with TRIDENT_VERIFY_COMPUTE_COPIES=1 (tests/CMakeLists.txt): a
// weight written in place without mark_data_changed is then an error naming it.
TEST(Autograd, AStaleComputeCopyIsCaughtWhenVerifying) {
  const char* verify = std::getenv("TRIDENT_VERIFY_COMPUTE_COPIES");
  if (verify == nullptr || std::string(verify) == "0") GTEST_SKIP() << "TRIDENT_VERIFY_COMPUTE_COPIES is not set";
  Variable master(Tensor::from_vector<float>({0.1f, 0.2f}, {2}), true);
  master.set_name("layer.weight");
  (void)cast_cached(master, DType::bf16);
  master.data().span<float>()[1] = 7.0f;  // unannounced
  try {
    (void)cast_cached(master, DType::bf16);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("layer.weight"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("stale"), std::string::npos) << e.message();
  }
}

TEST(Autograd, ShapeMismatchNamesOpAndShapes) {
  Variable a = leaf({1, 2, 3}, {3});
  Variable b = leaf({1, 2}, {2});
  try {
    (void)add(a, b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "add: shape mismatch [3] vs [2]");
  }
  Variable i(Tensor::zeros({3}, DType::i32), false);
  EXPECT_THROW((void)add(a, i), Error);
}

}  // namespace
}  // namespace trident::autograd
