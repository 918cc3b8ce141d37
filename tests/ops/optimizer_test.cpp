// Kernel-level tests of the fused optimizer steps: AdamW in f64 against a naive
// PyTorch-order reference (to ~1e-15), f32 and bf16 gradients, the compute copy
// written in the same pass, grad_scale, thread-count invariance (including the
// scalar tails), SGD with momentum/dampening/nesterov, sum_of_squares, errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/helpers.h"

#include <cmath>
#include <cstring>
#include <random>

#include "trident/core/parallel.h"
#include "trident/ops/optimizer.h"

namespace trident {
namespace {

using testing::f64;
using testing::random_tensor;
using testing::rel_err;

using ::testing::AllOf;
using ::testing::HasSubstr;

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

double max_rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(std::fabs(b[i]), 1e-30));
  return worst;
}

double max_abs_err(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

struct ThreadGuard {
  int saved = num_threads();
  ~ThreadGuard() { set_num_threads(saved); }
};

// torch.optim.AdamW (single tensor, amsgrad off) in f64, written out plainly.
struct NaiveAdamW {
  std::vector<double> p, m, v;
  void step(const std::vector<double>& grad, const ops::AdamWConfig& c, std::int64_t t, double grad_scale) {
    const double bc1 = 1 - std::pow(c.beta1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(c.beta2, static_cast<double>(t));
    const double step_size = c.lr / bc1, bc2_sqrt = std::sqrt(bc2), w = 1 - c.beta1;
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = grad[i] * grad_scale;
      p[i] = p[i] * (1 - c.lr * c.weight_decay);
      m[i] = std::fabs(w) < 0.5 ? m[i] + w * (g - m[i]) : g - (g - m[i]) * (1 - w);
      v[i] = v[i] * c.beta2 + (1 - c.beta2) * g * g;
      p[i] = p[i] + (-step_size * m[i]) / (std::sqrt(v[i]) / bc2_sqrt + c.eps);
    }
  }
};

TEST(AdamW, F64MatchesPyTorchOrderReference) {
  const std::int64_t n = 1000;
  const ops::AdamWConfig config{.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  Tensor p = random_tensor({n}, 1, -1, 1, DType::f64);
  Tensor m = Tensor::zeros({n}, DType::f64), v = Tensor::zeros({n}, DType::f64);
  NaiveAdamW ref{f64(p), f64(m), f64(v)};
  for (std::int64_t t = 1; t <= 5; ++t) {
    Tensor g = random_tensor({n}, 100 + static_cast<std::uint64_t>(t), -1, 1, DType::f64);
    ops::adamw_step(p, g, m, v, config, t, 0.7);
    ref.step(f64(g), config, t, 0.7);
  }
  EXPECT_LT(max_rel_err(f64(p), ref.p), 1e-15);
  EXPECT_LT(max_rel_err(f64(m), ref.m), 1e-15);
  EXPECT_LT(max_rel_err(f64(v), ref.v), 1e-15);
}

TEST(AdamW, F32AndBf16GradientsTrackTheF64Reference) {
  const std::int64_t n = 4099;  // vector body and a scalar tail
  const ops::AdamWConfig config{.lr = 1e-2, .weight_decay = 0.01};
  for (DType grad_dtype : {DType::f32, DType::bf16}) {
    Tensor p = random_tensor({n}, 2);
    Tensor m = Tensor::zeros({n}), v = Tensor::zeros({n});
    NaiveAdamW ref{f64(p), f64(m), f64(v)};
    for (std::int64_t t = 1; t <= 3; ++t) {
      Tensor g = random_tensor({n}, 200 + static_cast<std::uint64_t>(t), -1, 1, grad_dtype);
      ops::adamw_step(p, g, m, v, config, t);
      ref.step(f64(g), config, t, 1.0);
    }
    EXPECT_LT(max_rel_err(f64(p), ref.p), 1e-5) << dtype_name(grad_dtype);
    EXPECT_LT(max_rel_err(f64(v), ref.v), 1e-5) << dtype_name(grad_dtype);
  }
}

TEST(AdamW, ParamCopyIsTheRoundedUpdatedParameter) {
  const std::int64_t n = 1037;
  for (DType copy_dtype : {DType::bf16, DType::f16, DType::f32}) {
    Tensor p = random_tensor({n}, 3), m = random_tensor({n}, 4, -0.1, 0.1), v = random_tensor({n}, 5, 0, 0.01);
    Tensor copy = Tensor::empty({n}, copy_dtype);
    ops::adamw_step(p, random_tensor({n}, 6, -1, 1, DType::bf16), m, v, {.lr = 1e-3}, 7, 1.0, &copy);
    EXPECT_TRUE(bit_equal(copy, p.to(copy_dtype))) << dtype_name(copy_dtype);
  }
  // A bf16 copy 32-byte aligned is written with streaming stores, one that is not with plain ones.
  for (std::int64_t offset : {0, 1, 16}) {
    Tensor p = random_tensor({n}, 3), m = random_tensor({n}, 4, -0.1, 0.1), v = random_tensor({n}, 5, 0, 0.01);
    Tensor copy = Tensor::empty({n + offset}, DType::bf16).slice0(offset, n + offset);
    ops::adamw_step(p, random_tensor({n}, 6, -1, 1), m, v, {.lr = 1e-3}, 7, 1.0, &copy);
    EXPECT_TRUE(bit_equal(copy, p.to(DType::bf16))) << "offset " << offset;
  }
}

// The multi-tensor step gives each tensor exactly its single-tensor step.
TEST(AdamW, MultiTensorStepIsTheSingleTensorStepOfEach) {
  const std::vector<std::int64_t> sizes = {1037, 5, 70000};
  std::vector<Tensor> p, g, m, v, p1, m1, v1;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto seed = static_cast<std::uint64_t>(10 * i);
    p.push_back(random_tensor({sizes[i]}, seed + 1));
    g.push_back(random_tensor({sizes[i]}, seed + 2, -1, 1, DType::bf16));
    m.push_back(random_tensor({sizes[i]}, seed + 3, -0.1, 0.1));
    v.push_back(random_tensor({sizes[i]}, seed + 4, 0, 0.01));
    p1.push_back(p.back().clone());
    m1.push_back(m.back().clone());
    v1.push_back(v.back().clone());
  }
  const ops::AdamWConfig config{.lr = 1e-3, .weight_decay = 0.1};
  std::vector<ops::AdamWTensors> group;
  for (std::size_t i = 0; i < sizes.size(); ++i) group.push_back({&p[i], &g[i], &m[i], &v[i]});
  ops::adamw_step_multi(group, config, 7, 0.5);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    ops::adamw_step(p1[i], g[i], m1[i], v1[i], config, 7, 0.5);
    EXPECT_TRUE(bit_equal(p[i], p1[i])) << i;
    EXPECT_TRUE(bit_equal(m[i], m1[i])) << i;
    EXPECT_TRUE(bit_equal(v[i], v1[i])) << i;
  }
  ops::adamw_step_multi({}, config, 8);  // nothing to do
}

TEST(AdamW, GradScaleMultipliesTheGradientFirst) {
  // Scaling by powers of two is exact, so the two runs must agree bit for bit.
  const std::int64_t n = 531;
  Tensor g = random_tensor({n}, 7);
  Tensor scaled = Tensor::empty({n});
  for (std::int64_t i = 0; i < n; ++i) scaled.data<float>()[i] = g.data<float>()[i] * 1024.0f;
  Tensor p1 = random_tensor({n}, 8), p2 = p1.clone();
  Tensor m1 = Tensor::zeros({n}), v1 = Tensor::zeros({n}), m2 = Tensor::zeros({n}), v2 = Tensor::zeros({n});
  ops::adamw_step(p1, g, m1, v1, {.lr = 1e-2}, 1);
  ops::adamw_step(p2, scaled, m2, v2, {.lr = 1e-2}, 1, 1.0 / 1024.0);
  EXPECT_TRUE(bit_equal(p1, p2));
  EXPECT_TRUE(bit_equal(v1, v2));
}

TEST(AdamW, ResultsDoNotDependOnThreadCount) {
  ThreadGuard guard;
  const std::int64_t n = 100003;
  Tensor g = random_tensor({n}, 9, -1, 1, DType::bf16);
  Tensor p0 = random_tensor({n}, 10), m0 = random_tensor({n}, 11, -0.1, 0.1), v0 = random_tensor({n}, 12, 0, 0.01);
  Tensor out[2][4];
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Tensor p = p0.clone(), m = m0.clone(), v = v0.clone(), copy = Tensor::empty({n}, DType::bf16);
    ops::adamw_step(p, g, m, v, {.lr = 1e-3, .weight_decay = 0.1}, 3, 0.5, &copy);
    out[threads - 1][0] = p;
    out[threads - 1][1] = m;
    out[threads - 1][2] = v;
    out[threads - 1][3] = copy;
  }
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(bit_equal(out[0][k], out[1][k])) << "tensor " << k;
}

TEST(AdamW, BadArgumentsAreNamed) {
  Tensor p = random_tensor({4, 3}, 1), m = Tensor::zeros({4, 3}), v = Tensor::zeros({4, 3});
  EXPECT_THAT([&] { ops::adamw_step(p, random_tensor({3, 4}, 2), m, v, {}, 1); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("adamw_step"), HasSubstr("[3, 4]"), HasSubstr("[4, 3]"))));
  Tensor pb = p.to(DType::bf16);
  EXPECT_THAT([&] { ops::adamw_step(pb, p, m, v, {}, 1); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("adamw_step"), HasSubstr("bf16"), HasSubstr("f32 or f64"))));
  EXPECT_THAT([&] { ops::adamw_step(p, p.clone(), m, v, {}, 0); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("adamw_step"), HasSubstr("step 0"))));
  Tensor m64 = Tensor::zeros({4, 3}, DType::f64);
  EXPECT_THAT([&] { ops::adamw_step(p, p.clone(), m64, v, {}, 1); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("exp_avg"), HasSubstr("f64"))));
  EXPECT_THAT([&] { ops::adamw_step(p, p.clone(), m, v, {.beta2 = 1.0}, 1); },
              ::testing::ThrowsMessage<Error>(HasSubstr("beta2 1")));
}

// torch.optim.SGD in f64, written out plainly (buf is None before the first step).
void naive_sgd(std::vector<double>& p, const std::vector<double>& grad, std::vector<double>& buf, bool first, double lr,
               double momentum, double wd, double dampening, bool nesterov) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    double g = grad[i] + wd * p[i];
    if (momentum != 0) {
      buf[i] = first ? g : buf[i] * momentum + (1 - dampening) * g;
      g = nesterov ? g + momentum * buf[i] : buf[i];
    }
    p[i] = p[i] - lr * g;
  }
}

TEST(Sgd, MomentumDampeningAndNesterovMatchTorch) {
  struct Config {
    double momentum, dampening, wd;
    bool nesterov;
  };
  for (Config c : {Config{0.0, 0.0, 0.0, false}, Config{0.9, 0.0, 1e-2, false}, Config{0.9, 0.3, 0.0, false},
                   Config{0.8, 0.0, 5e-2, true}}) {
    const std::int64_t n = 301;
    Tensor p = random_tensor({n}, 20, -1, 1, DType::f64), buf;
    auto ref = f64(p);
    std::vector<double> ref_buf(static_cast<std::size_t>(n));
    for (int s = 0; s < 3; ++s) {
      Tensor g = random_tensor({n}, 30 + static_cast<std::uint64_t>(s), -1, 1, DType::f64);
      ops::sgd_step(p, g, buf, 0.1, c.momentum, c.wd, c.dampening, c.nesterov);
      naive_sgd(ref, f64(g), ref_buf, s == 0, 0.1, c.momentum, c.wd, c.dampening, c.nesterov);
    }
    EXPECT_LT(max_abs_err(f64(p), ref), 1e-15) << c.momentum << " " << c.dampening << " " << c.nesterov;
    EXPECT_EQ(buf.defined(), c.momentum != 0);
  }
  // f32 params with bf16 gradients and a grad scale (0.5 exact in both).
  Tensor p = random_tensor({77}, 21), buf;
  Tensor g = random_tensor({77}, 22, -1, 1, DType::bf16);
  auto ref = f64(p);
  std::vector<double> ref_buf(77), scaled = f64(g);
  for (double& x : scaled) x *= 0.5;
  ops::sgd_step(p, g, buf, 0.05, 0.9, 0.0, 0.0, true, 0.5);
  naive_sgd(ref, scaled, ref_buf, true, 0.05, 0.9, 0.0, 0.0, true);
  EXPECT_LT(max_rel_err(f64(p), ref), 1e-6);
  EXPECT_THAT([&] { ops::sgd_step(p, g, buf, 0.1, 0.9, 0.0, 0.5, true); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("sgd_step"), HasSubstr("nesterov"))));
}

TEST(SumOfSquares, MatchesNaiveAndDoesNotDependOnThreadCount) {
  ThreadGuard guard;
  const std::int64_t n = 70001;
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    Tensor t = random_tensor({n}, 40, -2, 2, dtype);
    double naive = 0;
    for (double x : f64(t)) naive += x * x;
    set_num_threads(1);
    const double one = ops::sum_of_squares(t);
    set_num_threads(2);
    const double two = ops::sum_of_squares(t);
    EXPECT_EQ(one, two) << dtype_name(dtype);
    EXPECT_NEAR(one, naive, 1e-12 * naive) << dtype_name(dtype);
  }
  EXPECT_EQ(ops::sum_of_squares(Tensor::zeros({0})), 0.0);
}

}  // namespace
}  // namespace trident
