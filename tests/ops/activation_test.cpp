// Kernel-level tests of the activations: the f32 fast-exp paths against libm in
// f64 element by element over a wide range (tails included), bf16 rounding
// once, derivatives against f64 formulas, and error messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "testing/helpers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>

#include "trident/autograd/autograd.h"
#include "trident/ops/activation.h"
#include "trident/ops/elementwise.h"

namespace trident {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// 0.5 x (1 + tanh u); for u < -1, 1 + tanh u is evaluated as 2 e^{2u} / (1 + e^{2u}),
// which does not cancel (in f64 1 + tanh(u) is exactly 0 below u = -19).
double ref_gelu_tanh(double x) {
  const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  const double one_plus_tanh = u < -1.0 ? 2.0 * std::exp(2.0 * u) / (1.0 + std::exp(2.0 * u)) : 1.0 + std::tanh(u);
  return 0.5 * x * one_plus_tanh;
}
double ref_gelu_tanh_grad(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  const double t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
double ref_gelu(double x) { return 0.5 * x * std::erfc(-x / std::numbers::sqrt2); }
double ref_gelu_grad(double x) {
  return 0.5 * std::erfc(-x / std::numbers::sqrt2) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
}
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double ref_silu(double x) { return x * ref_sigmoid(x); }
double ref_silu_grad(double x) { return ref_sigmoid(x) * (1.0 + x * (1.0 - ref_sigmoid(x))); }
double ref_tanh(double x) { return std::tanh(x); }

// Every f32 from -lim to lim on a fine grid plus extreme values.
Tensor sweep(double lim) {
  std::vector<float> v;
  for (double x = -lim; x <= lim; x += 1.0 / 256) v.push_back(static_cast<float>(x));
  for (float e : {-1e30f, -1e4f, -200.0f, -88.5f, -87.0f, 87.0f, 88.5f, 200.0f, 1e4f, 1e30f, 0.0f, -0.0f, 1e-30f, -1e-30f})
    v.push_back(e);
  return Tensor::from_vector<float>(v, {static_cast<std::int64_t>(v.size())});
}

// Each element within abs + rel (1 + |x|^3) |f(x)|: the exponentials' condition
// number grows like |x|^3 for GELU-tanh (|x| for SiLU, x^2 for GELU), so an f32
// evaluation cannot do better than that in the tails.
void expect_close(const Tensor& out, const Tensor& in, double (*f)(double), double rel, double abs, const char* what) {
  const auto o = out.to(DType::f64).to_vector<double>(), x = in.to(DType::f64).to_vector<double>();
  int failures = 0;
  for (std::size_t i = 0; i < o.size() && failures < 5; ++i) {
    const double want = f(x[i]);
    const double tol = abs + rel * (1.0 + std::fabs(x[i] * x[i] * x[i])) * std::fabs(want);
    if (!(std::fabs(o[i] - want) <= tol)) {
      ADD_FAILURE() << what << "(" << x[i] << ") = " << o[i] << ", expected " << want;
      ++failures;
    }
  }
}

TEST(ActivationKernel, F32ForwardIsAccurateEverywhere) {
  const Tensor x = sweep(30.0);
  expect_close(ops::gelu_tanh(x), x, ref_gelu_tanh, 5e-7, 1e-37, "gelu_tanh");
  expect_close(ops::gelu(x), x, ref_gelu, 5e-7, 1e-37, "gelu");
  expect_close(ops::silu(x), x, ref_silu, 5e-7, 1e-37, "silu");
}

// tanh in f32 (polynomial below |x| = 0.55, exp form above) within 2 ulp of the
// f64 tanh everywhere, including tiny, denormal and huge arguments and across
// the branch point; odd; saturates to +-1.
TEST(ActivationKernel, F32TanhIsWithinTwoUlp) {
  std::vector<float> v;
  for (double x = -12.0; x <= 12.0; x += 1.0 / 1024) v.push_back(static_cast<float>(x));
  for (float e = 1e-30f; e < 1.0f; e *= 1.37f) {
    v.push_back(e);
    v.push_back(-e);
  }
  for (float e : {0.55f, std::nextafter(0.55f, 0.0f), -0.55f, std::nextafter(-0.55f, 0.0f), 1e-40f, -1e-40f, 0.0f, -0.0f,
                  20.0f, -20.0f, 88.0f, 1e30f, -1e30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity()})
    v.push_back(e);
  const Tensor x = Tensor::from_vector<float>(v, {static_cast<std::int64_t>(v.size())});
  const auto y = ops::tanh(x).to_vector<float>();
  int failures = 0;
  for (std::size_t i = 0; i < v.size() && failures < 5; ++i) {
    const double want = std::tanh(static_cast<double>(v[i]));
    const float wf = static_cast<float>(want);
    const double ulp = std::max<double>(std::nextafter(std::fabs(wf), 2.0f) - std::fabs(wf), 1e-45);
    if (!(std::fabs(y[i] - want) <= 2 * ulp) || std::signbit(y[i]) != std::signbit(v[i])) {
      ADD_FAILURE() << "tanh(" << v[i] << ") = " << y[i] << ", expected " << want;
      ++failures;
    }
  }
  EXPECT_EQ(y[y.size() - 2], 1.0f);   // tanh(inf)
  EXPECT_EQ(y[y.size() - 1], -1.0f);  // tanh(-inf)
}

TEST(ActivationKernel, TanhBackwardIsFromTheOutput) {
  std::mt19937_64 gen(9);
  std::uniform_real_distribution<double> dist(-6.0, 6.0);
  Tensor x = Tensor::empty({3, 257}, DType::f64), dy = Tensor::empty({3, 257}, DType::f64);
  for (auto* t : {&x, &dy})
    for (double& e : t->span<double>()) e = dist(gen);
  const Tensor y = ops::tanh(x);
  const auto dx = ops::tanh_backward(dy, y).to_vector<double>();
  const auto xv = x.to_vector<double>(), dv = dy.to_vector<double>();
  for (std::size_t i = 0; i < dx.size(); ++i) {
    const double c = std::cosh(xv[i]);
    ASSERT_NEAR(dx[i], dv[i] / (c * c), 1e-15 * (1 + std::fabs(dv[i]))) << i;
  }
  // f32 and bf16: the same formula on the stored output, rounded once.
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor yt = y.to(dt), dyt = dy.to(dt);
    const auto got = ops::tanh_backward(dyt, yt).to(DType::f64).to_vector<double>();
    const auto yv = yt.to(DType::f64).to_vector<double>(), dtv = dyt.to(DType::f64).to_vector<double>();
    const double eps = dt == DType::f32 ? 5e-7 : (dt == DType::bf16 ? 8e-3 : 1e-3);
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double want = dtv[i] * (1 - yv[i]) * (1 + yv[i]);
      const double denormal = dt == DType::f16 ? 3e-8 : 1e-30;  // half of f16's smallest denormal
      ASSERT_NEAR(got[i], want, eps * std::fabs(want) + denormal) << dtype_name(dt) << " " << i;
    }
  }
}

TEST(ActivationKernel, F32BackwardMatchesF64Derivatives) {
  const Tensor x = sweep(30.0);
  const Tensor ones = Tensor::full(x.shape(), 1.0);
  expect_close(ops::gelu_tanh_backward(ones, x), x, ref_gelu_tanh_grad, 1e-6, 1e-7, "gelu_tanh'");
  expect_close(ops::gelu_backward(ones, x), x, ref_gelu_grad, 1e-6, 1e-7, "gelu'");
  expect_close(ops::silu_backward(ones, x), x, ref_silu_grad, 1e-6, 1e-7, "silu'");
}

TEST(ActivationKernel, F64IsExactToRounding) {
  const Tensor x = sweep(10.0).to(DType::f64);
  expect_close(ops::gelu_tanh(x), x, ref_gelu_tanh, 1e-14, 1e-300, "gelu_tanh");
  expect_close(ops::gelu(x), x, ref_gelu, 1e-14, 1e-300, "gelu");
  expect_close(ops::silu(x), x, ref_silu, 1e-14, 1e-300, "silu");
  expect_close(ops::tanh(x), x, ref_tanh, 1e-15, 1e-300, "tanh");
}

TEST(ActivationKernel, Bf16RoundsTheF32ResultOnce) {
  const Tensor x = sweep(12.0).to(DType::bf16);
  const Tensor xf = x.to(DType::f32);
  auto same = [](const Tensor& a, const Tensor& b) { return std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0; };
  EXPECT_TRUE(same(ops::gelu_tanh(x), ops::gelu_tanh(xf).to(DType::bf16)));
  EXPECT_TRUE(same(ops::silu(x), ops::silu(xf).to(DType::bf16)));
  EXPECT_TRUE(same(ops::tanh(x), ops::tanh(xf).to(DType::bf16)));
  const Tensor xh = sweep(12.0).to(DType::f16);
  EXPECT_TRUE(same(ops::tanh(xh), ops::tanh(xh.to(DType::f32)).to(DType::f16)));
  EXPECT_TRUE(same(ops::swiglu(x, x), ops::swiglu(xf, xf).to(DType::bf16)));
  EXPECT_TRUE(same(ops::gelu_tanh_backward(x, x), ops::gelu_tanh_backward(xf, xf).to(DType::bf16)));
}

TEST(ActivationKernel, NanPropagates) {
  const Tensor x = Tensor::from_vector<float>({std::nanf(""), 1.0f}, {2});
  for (const Tensor& y : {ops::gelu_tanh(x), ops::gelu(x), ops::silu(x), ops::tanh(x)}) EXPECT_TRUE(std::isnan(y.to_vector<float>()[0]));
  EXPECT_TRUE(std::isnan(ops::gelu_tanh(x.to(DType::bf16)).to_vector<float>()[0]));
}

TEST(ActivationKernel, SwigluAndItsGradientsAtScale) {
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> dist(-8.0, 8.0);
  std::vector<float> g(256 * 3072 / 64), u(g.size()), d(g.size());
  for (auto* v : {&g, &u, &d})
    for (float& e : *v) e = static_cast<float>(dist(gen));
  const Shape s{static_cast<std::int64_t>(g.size())};
  const Tensor gate = Tensor::from_vector(g, s), up = Tensor::from_vector(u, s), dy = Tensor::from_vector(d, s);
  const auto out = ops::swiglu(gate, up).to_vector<float>();
  const auto grads = ops::swiglu_backward(dy, gate, up);
  const auto dg = grads.dgate.to_vector<float>(), du = grads.dup.to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double gi = g[i], ui = u[i], di = d[i];
    ASSERT_NEAR(out[i], ref_silu(gi) * ui, 1e-5 * (1 + std::fabs(ref_silu(gi) * ui))) << i;
    ASSERT_NEAR(dg[i], di * ui * ref_silu_grad(gi), 1e-5 * (1 + std::fabs(di * ui))) << i;
    ASSERT_NEAR(du[i], di * ref_silu(gi), 1e-5 * (1 + std::fabs(di * gi))) << i;
  }
}

TEST(ActivationKernel, BiasGeluTanhEqualsUnfusedInF64) {
  std::mt19937_64 gen(8);
  std::uniform_real_distribution<double> dist(-3.0, 3.0);
  Tensor x = Tensor::empty({4, 5, 33}, DType::f64), b = Tensor::empty({33}, DType::f64);
  for (auto* t : {&x, &b})
    for (double& e : t->span<double>()) e = dist(gen);
  const auto fused = ops::bias_gelu_tanh(x, b).to_vector<double>();
  const auto unfused = ops::gelu_tanh(ops::bias_add(x, b)).to_vector<double>();
  for (std::size_t i = 0; i < fused.size(); ++i) ASSERT_NEAR(fused[i], unfused[i], 1e-15) << i;
  const auto grads = ops::bias_gelu_tanh_backward(x, x, b);  // dy = x
  const auto dx = ops::gelu_tanh_backward(x, ops::bias_add(x, b)).to_vector<double>();
  EXPECT_EQ(grads.dx.to_vector<double>(), dx);
  EXPECT_EQ(grads.dbias.shape(), Shape{33});
}

TEST(ActivationErrors, MessagesNameTheOpAndShapes) {
  const auto message = [](const std::function<void()>& f) { return testing::error_what(f); };
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2});
  EXPECT_THAT(message([&] { ops::swiglu(a, b); }),
              AllOf(HasSubstr("swiglu"), HasSubstr("up"), HasSubstr("[3, 2]"), HasSubstr("[2, 3]")));
  EXPECT_THAT(message([&] { ops::swiglu(a, a.to(DType::bf16)); }), AllOf(HasSubstr("swiglu"), HasSubstr("bf16")));
  EXPECT_THAT(message([&] { ops::gelu_tanh_backward(b, a); }),
              AllOf(HasSubstr("gelu_tanh_backward"), HasSubstr("dy"), HasSubstr("[3, 2]"), HasSubstr("[2, 3]")));
  EXPECT_THAT(message([&] { ops::silu(Tensor::zeros({4}, DType::i64)); }), AllOf(HasSubstr("silu"), HasSubstr("i64")));
  EXPECT_THAT(message([&] { ops::bias_gelu_tanh(a, Tensor::zeros({2})); }),
              AllOf(HasSubstr("bias_gelu_tanh"), HasSubstr("[2]"), HasSubstr("[2, 3]")));
  EXPECT_THAT(message([&] { ops::tanh(Tensor::zeros({4}, DType::i32)); }), AllOf(HasSubstr("tanh"), HasSubstr("i32")));
  EXPECT_THAT(message([&] { ops::tanh_backward(b, a); }),
              AllOf(HasSubstr("tanh_backward"), HasSubstr("dy"), HasSubstr("[3, 2]"), HasSubstr("[2, 3]")));
  EXPECT_THAT(message([&] { ops::tanh_backward(a.to(DType::f64), a); }),
              AllOf(HasSubstr("tanh_backward"), HasSubstr("f64"), HasSubstr("f32")));
  EXPECT_THAT(message([&] { ops::swiglu_backward(a, a, Tensor()); }), AllOf(HasSubstr("swiglu_backward"), HasSubstr("up")));
}

}  // namespace
}  // namespace trident
