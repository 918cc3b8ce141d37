// Kernel-level tests of the activations: the f32 fast-exp paths against libm in
// f64 element by element over a wide range (tails included), bf16 rounding
// once, derivatives against f64 formulas, and error messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "testing/helpers.h"

#include <cmath>
#include <cstring>
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
}

TEST(ActivationKernel, Bf16RoundsTheF32ResultOnce) {
  const Tensor x = sweep(12.0).to(DType::bf16);
  const Tensor xf = x.to(DType::f32);
  auto same = [](const Tensor& a, const Tensor& b) { return std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0; };
  EXPECT_TRUE(same(ops::gelu_tanh(x), ops::gelu_tanh(xf).to(DType::bf16)));
  EXPECT_TRUE(same(ops::silu(x), ops::silu(xf).to(DType::bf16)));
  EXPECT_TRUE(same(ops::swiglu(x, x), ops::swiglu(xf, xf).to(DType::bf16)));
  EXPECT_TRUE(same(ops::gelu_tanh_backward(x, x), ops::gelu_tanh_backward(xf, xf).to(DType::bf16)));
}

TEST(ActivationKernel, NanPropagates) {
  const Tensor x = Tensor::from_vector<float>({std::nanf(""), 1.0f}, {2});
  for (const Tensor& y : {ops::gelu_tanh(x), ops::gelu(x), ops::silu(x)}) EXPECT_TRUE(std::isnan(y.to_vector<float>()[0]));
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
  const auto message = [](const std::function<void()>& f) { return test::error_what(f); };
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2});
  EXPECT_THAT(message([&] { ops::swiglu(a, b); }),
              AllOf(HasSubstr("swiglu"), HasSubstr("up"), HasSubstr("[3, 2]"), HasSubstr("[2, 3]")));
  EXPECT_THAT(message([&] { ops::swiglu(a, a.to(DType::bf16)); }), AllOf(HasSubstr("swiglu"), HasSubstr("bf16")));
  EXPECT_THAT(message([&] { ops::gelu_tanh_backward(b, a); }),
              AllOf(HasSubstr("gelu_tanh_backward"), HasSubstr("dy"), HasSubstr("[3, 2]"), HasSubstr("[2, 3]")));
  EXPECT_THAT(message([&] { ops::silu(Tensor::zeros({4}, DType::i64)); }), AllOf(HasSubstr("silu"), HasSubstr("i64")));
  EXPECT_THAT(message([&] { ops::bias_gelu_tanh(a, Tensor::zeros({2})); }),
              AllOf(HasSubstr("bias_gelu_tanh"), HasSubstr("[2]"), HasSubstr("[2, 3]")));
  EXPECT_THAT(message([&] { ops::swiglu_backward(a, a, Tensor()); }), AllOf(HasSubstr("swiglu_backward"), HasSubstr("up")));
}

}  // namespace
}  // namespace trident
