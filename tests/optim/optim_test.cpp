#include "trident/optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "trident/autograd/autograd.h"
#include "trident/ops/elementwise.h"
#include "trident/optim/loss_scaler.h"
#include "trident/optim/schedule.h"

namespace trident::optim {
namespace {

class TwoParams : public nn::Module {
 public:
  TwoParams() : nn::Module("m") {
    w = &add_parameter("weight", Shape{3}, nn::Init{nn::InitKind::normal, 1.0}, true);
    b = &add_parameter("bias", Shape{3}, nn::Init{nn::InitKind::zeros, 0}, false);
  }
  nn::Parameter* w;
  nn::Parameter* b;
};

// Independent AdamW (PyTorch semantics) on one scalar.
double adamw_reference(double p, const std::vector<double>& grads, double lr, double b1, double b2, double eps,
                       double wd) {
  double m = 0, v = 0;
  for (std::size_t t = 1; t <= grads.size(); ++t) {
    const double g = grads[t - 1];
    p *= 1 - lr * wd;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mhat = m / (1 - std::pow(b1, static_cast<double>(t)));
    const double vhat = v / (1 - std::pow(b2, static_cast<double>(t)));
    p -= lr * mhat / (std::sqrt(vhat) + eps);
  }
  return p;
}

TEST(AdamW, MatchesReferenceAndSkipsDecayOnBiases) {
  TwoParams m;
  m.initialize(1, DType::f64);
  const auto w0 = m.w->var.data().to_vector<double>();
  AdamW opt(m.parameters(), AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  std::vector<std::vector<double>> grads = {{0.1, -0.2, 0.3}, {0.05, 0.4, -0.1}, {-0.3, 0.2, 0.2}};
  for (const auto& g : grads) {
    m.w->var.set_grad(Tensor::from_vector<double>(g, {3}));
    m.b->var.set_grad(Tensor::from_vector<double>(g, {3}));
    opt.step(0.01);
  }
  for (int i = 0; i < 3; ++i) {
    std::vector<double> gi;
    for (const auto& g : grads) gi.push_back(g[static_cast<std::size_t>(i)]);
    EXPECT_NEAR(m.w->var.data().to_vector<double>()[static_cast<std::size_t>(i)],
                adamw_reference(w0[static_cast<std::size_t>(i)], gi, 0.01, 0.9, 0.95, 1e-8, 0.1), 1e-14);
    EXPECT_NEAR(m.b->var.data().to_vector<double>()[static_cast<std::size_t>(i)],
                adamw_reference(0.0, gi, 0.01, 0.9, 0.95, 1e-8, 0.0), 1e-14);
  }
  EXPECT_EQ(opt.steps_taken(), 3);
  auto st = opt.state();
  EXPECT_EQ(st.count("exp_avg/m.weight"), 1u);
  EXPECT_EQ(st.count("exp_avg_sq/m.bias"), 1u);
}

// bias_correction = false (DeepSpeed's FusedAdam option): m / (√v + eps) without the 1 − β^t divisions; and
// set_method swaps the betas between steps (DeepSpeed's OneCycle momentum), keeping the moments.
TEST(AdamW, WithoutBiasCorrectionAndNewBetas) {
  TwoParams m;
  m.initialize(1, DType::f64);
  const double w0 = m.w->var.data().to_vector<double>()[0];
  AdamW opt(m.parameters(), AdamWOptions{0.9, 0.95, 1e-8, 0.0, false});
  const std::vector<double> g1 = {0.1, -0.2, 0.3}, g2 = {0.05, 0.4, -0.1};
  m.w->var.set_grad(Tensor::from_vector<double>(g1, {3}));
  m.b->var.set_grad(Tensor::from_vector<double>(g1, {3}));
  opt.step(0.01);
  double mom = 0.1 * g1[0], var = 0.05 * g1[0] * g1[0];
  double expected = w0 - 0.01 * mom / (std::sqrt(var) + 1e-8);
  EXPECT_NEAR(m.w->var.data().to_vector<double>()[0], expected, 1e-15);
  opt.set_method(AdamWOptions{0.8, 0.99, 1e-8, 0.0, false});
  m.w->var.set_grad(Tensor::from_vector<double>(g2, {3}));
  m.b->var.set_grad(Tensor::from_vector<double>(g2, {3}));
  opt.step(0.01);
  mom = 0.8 * mom + 0.2 * g2[0];
  var = 0.99 * var + 0.01 * g2[0] * g2[0];
  expected -= 0.01 * mom / (std::sqrt(var) + 1e-8);
  EXPECT_NEAR(m.w->var.data().to_vector<double>()[0], expected, 1e-15);
  EXPECT_THROW(opt.set_method(SGDOptions{}), Error);  // another optimizer's state would not fit
}

// A parameter no loss reached this step is updated as with a zero gradient (optim/optimizer.h): its
// moments decay and weight decay applies, as data parallelism's reduced buffers would have it.
TEST(Optimizers, AMissingGradientIsAZeroGradient) {
  auto run = [](bool adamw, bool missing) {
    TwoParams m;
    m.initialize(1, DType::f64);
    std::unique_ptr<Optimizer> opt;
    if (adamw) {
      opt = std::make_unique<AdamW>(m.parameters(), AdamWOptions{0.9, 0.95, 1e-8, 0.1});
    } else {
      opt = std::make_unique<SGD>(m.parameters(), SGDOptions{0.9, 0.1, false});
    }
    m.w->var.set_grad(Tensor::from_vector<double>({0.1, -0.2, 0.3}, {3}));
    m.b->var.set_grad(Tensor::from_vector<double>({0.3, 0.1, -0.2}, {3}));
    opt->step(0.01);
    opt->zero_grad();
    m.b->var.set_grad(Tensor::from_vector<double>({0.2, 0.2, 0.2}, {3}));
    if (missing) {
      m.w->var.set_grad(Tensor());
    } else {
      m.w->var.set_grad(Tensor::zeros({3}, DType::f64));
    }
    opt->step(0.01);
    return m.w->var.data().to_vector<double>();
  };
  for (bool adamw : {true, false}) {
    const auto want = run(adamw, false), got = run(adamw, true);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(got[i], want[i]) << (adamw ? "AdamW" : "SGD") << " element " << i;
  }
}

TEST(AdamW, StateRoundTripContinuesIdentically) {
  TwoParams a, b;
  a.initialize(2, DType::f64);
  b.initialize(2, DType::f64);
  AdamW oa(a.parameters(), {}), ob(b.parameters(), {});
  auto grad = Tensor::from_vector<double>({0.1, 0.2, -0.3}, {3});
  for (auto* p : a.parameters()) p->var.set_grad(grad.clone());
  oa.step(0.1);
  // Copy a's parameters and state into b, then take one more step on both.
  for (std::size_t i = 0; i < 2; ++i) b.parameters()[i]->var.data().copy_from(a.parameters()[i]->var.data());
  ob.load_state(oa.state());
  ob.set_step(oa.steps_taken());
  for (auto* p : a.parameters()) p->var.set_grad(grad.clone());
  for (auto* p : b.parameters()) p->var.set_grad(grad.clone());
  oa.step(0.1);
  ob.step(0.1);
  EXPECT_EQ(a.w->var.data().to_vector<double>(), b.w->var.data().to_vector<double>());
}

// Mixed precision: the bf16 copy the forward pass made of an f32 master weight
// is rewritten by the AdamW update itself, equal to a fresh conversion of the
// new master values, and reused by the next forward pass.
TEST(AdamW, RewritesTheComputeCopyInItsUpdate) {
  TwoParams m;
  m.initialize(3, DType::f32);
  AdamW opt(m.parameters(), AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  (void)autograd::cast_cached(m.w->var, DType::bf16);  // the forward pass (its graph is gone)
  const void* copy_memory = m.w->var.compute_copy().raw_data();
  for (auto* p : m.parameters()) p->var.set_grad(Tensor::from_vector<float>({0.5f, -0.25f, 0.125f}, {3}));
  const auto before = m.w->var.data().to_vector<float>();
  opt.step(0.01);
  ASSERT_NE(m.w->var.data().to_vector<float>(), before);
  const Tensor copy = m.w->var.compute_copy();
  ASSERT_TRUE(copy.defined()) << "AdamW must keep the copy valid";
  EXPECT_EQ(copy.raw_data(), copy_memory) << "written in place, not reallocated";
  EXPECT_EQ(copy.to_vector<float>(), ops::cast(m.w->var.data(), DType::bf16).to_vector<float>());
  EXPECT_TRUE(autograd::cast_cached(m.w->var, DType::bf16).data().is_same(copy));
  // The bias had no copy: none is made, and its next cast converts afresh.
  EXPECT_FALSE(m.b->var.compute_copy().defined());
}

// A graph still alive across the step (retain_graph, or built before it) keeps
// the weights it was built with: AdamW leaves that copy alone and drops it.
TEST(AdamW, LeavesACopyALiveGraphHolds) {
  TwoParams m;
  m.initialize(4, DType::f32);
  AdamW opt(m.parameters(), AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  const autograd::Variable held = autograd::cast_cached(m.w->var, DType::bf16);
  const auto before = held.data().to_vector<float>();
  for (auto* p : m.parameters()) p->var.set_grad(Tensor::from_vector<float>({0.5f, -0.25f, 0.125f}, {3}));
  opt.step(0.01);
  EXPECT_EQ(held.data().to_vector<float>(), before);
  EXPECT_FALSE(m.w->var.compute_copy().defined());
  EXPECT_EQ(autograd::cast_cached(m.w->var, DType::bf16).data().to_vector<float>(),
            ops::cast(m.w->var.data(), DType::bf16).to_vector<float>());
}

TEST(SGD, MomentumMatchesPyTorchSemantics) {
  TwoParams m;
  m.initialize(3, DType::f64);
  m.w->var.data().fill_zero();
  SGD opt({m.w}, SGDOptions{0.9, 0.0, false});
  m.w->var.set_grad(Tensor::from_vector<double>({1, 1, 1}, {3}));
  opt.step(0.1);  // buf = g = 1; p = -0.1
  opt.step(0.1);  // buf = 0.9 + 1 = 1.9; p = -0.29
  EXPECT_NEAR(m.w->var.data().to_vector<double>()[0], -0.29, 1e-15);
}

TEST(Clipping, NormAndCoefficient) {
  TwoParams m;
  m.initialize(3, DType::f64);
  m.w->var.set_grad(Tensor::from_vector<double>({3, 0, 0}, {3}));
  m.b->var.set_grad(Tensor::from_vector<double>({0, 4, 0}, {3}));
  EXPECT_DOUBLE_EQ(grad_sum_of_squares(m.parameters()), 25.0);
  EXPECT_NEAR(clip_coefficient(5.0, 1.0), 0.2, 1e-6);
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_coefficient(5.0, 0.0), 1.0);
  EXPECT_FALSE(grads_have_inf_or_nan(m.parameters()));
  m.b->var.set_grad(Tensor::from_vector<double>({0, INFINITY, 0}, {3}));
  EXPECT_TRUE(grads_have_inf_or_nan(m.parameters()));
}

TEST(Schedule, WarmupCosineLinearConstantOneCycle) {
  ScheduleOptions o{1.0, 0.1, 10, 110, Decay::cosine};
  EXPECT_DOUBLE_EQ(learning_rate(o, 5), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10), 1.0);
  EXPECT_NEAR(learning_rate(o, 60), 0.55, 1e-12);  // halfway through the cosine
  EXPECT_NEAR(learning_rate(o, 110), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(o, 500), 0.1, 1e-12);
  o.decay = Decay::linear;
  EXPECT_NEAR(learning_rate(o, 60), 0.55, 1e-12);
  o.decay = Decay::constant;
  EXPECT_DOUBLE_EQ(learning_rate(o, 100), 1.0);
  o.decay = Decay::one_cycle;
  EXPECT_NEAR(learning_rate(o, 33), 1.0, 1e-12);
  EXPECT_NEAR(learning_rate(o, 110), 0.1, 1e-12);
  EXPECT_THROW(parse_decay("exponential"), Error);
}

// Warmup-stable-decay (Megatron's WSD): warmup over 10 steps, the peak until step 110 − 40 = 70, then
// down to min_lr over the last 40 steps; r = (step − 70) / 40.
TEST(Schedule, WarmupStableDecay) {
  ScheduleOptions o{1.0, 0.1, 10, 110, Decay::wsd, 40, WsdStyle::linear};
  EXPECT_DOUBLE_EQ(learning_rate(o, 5), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 40), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 70), 1.0);
  EXPECT_NEAR(learning_rate(o, 80), 0.1 + 0.9 * 0.75, 1e-12);  // r = 1/4
  EXPECT_NEAR(learning_rate(o, 110), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(o, 200), 0.1, 1e-12);
  o.wsd_style = WsdStyle::cosine;
  EXPECT_NEAR(learning_rate(o, 90), 0.55, 1e-12);  // r = 1/2: half way down
  o.wsd_style = WsdStyle::exponential;
  EXPECT_NEAR(learning_rate(o, 90), 0.1 + 0.9 * (2 * std::sqrt(0.5) - 1), 1e-12);
  EXPECT_NEAR(learning_rate(o, 110), 0.1, 1e-12);
  o.wsd_style = WsdStyle::minus_sqrt;
  EXPECT_NEAR(learning_rate(o, 80), 0.1 + 0.9 * 0.5, 1e-12);  // 1 − √(1/4)
  EXPECT_EQ(parse_wsd_style("minus_sqrt"), WsdStyle::minus_sqrt);
  EXPECT_THROW(parse_wsd_style("step"), Error);
}

// Inverse square root: peak · √warmup / √step after the warmup, floored at min_lr.
TEST(Schedule, InverseSquareRoot) {
  ScheduleOptions o{1.0, 0.1, 16, 1000, Decay::inverse_sqrt};
  EXPECT_DOUBLE_EQ(learning_rate(o, 8), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 16), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 64), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 256), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(o, 1000), std::max(0.1, 4.0 / std::sqrt(1000.0)));
  EXPECT_DOUBLE_EQ(learning_rate(o, 1000000), 0.1);
  // Megatron's OptimizerParamScheduler: min_lr after decay_steps, however high √warmup / √step still is.
  o.min_lr = 0.01;
  EXPECT_DOUBLE_EQ(learning_rate(o, 1000), 4.0 / std::sqrt(1000.0));
  EXPECT_DOUBLE_EQ(learning_rate(o, 1001), 0.01);
  o.min_lr = 0.1;
  o.decay_steps = 100000;
  EXPECT_DOUBLE_EQ(learning_rate(o, 1600), 0.1);  // the floor
  EXPECT_EQ(parse_decay("inverse_sqrt"), Decay::inverse_sqrt);
}

TEST(LossScaler, BacksOffOnOverflowAndGrows) {
  DynamicLossScaler s(1024, 3);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_FALSE(s.update(false));
  EXPECT_FALSE(s.update(false));
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.skipped_steps(), 1);
}

// DeepSpeed's hysteresis (docs/deepspeed.md): with h = 2 the first overflow since the scale last grew
// skips its step without halving; later ones halve (not below the minimum) until the scale grows again,
// which restores the hysteresis.
TEST(LossScaler, HysteresisAndMinimum) {
  DynamicLossScaler s(8, 2, 2, 2);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 8);
  EXPECT_EQ(s.hysteresis_left(), 1);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 4);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 2);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 2);  // the minimum
  EXPECT_FALSE(s.update(false));
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 4);
  EXPECT_EQ(s.hysteresis_left(), 2);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 4);
  EXPECT_EQ(s.skipped_steps(), 5);
}

}  // namespace
}  // namespace trident::optim
