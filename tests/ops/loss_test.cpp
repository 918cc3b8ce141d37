// Kernel-level tests of the fused cross-entropy: GPT-2-sized rows against a
// naive f64 log-softmax, ignore_index and all-ignored batches, large logits,
// bf16 logits, bit-identical results for 1 and 2 threads, micro-batch shares of
// a global token mean, and error messages naming the row, target and V.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/helpers.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "trident/autograd/autograd.h"
#include "trident/core/parallel.h"
#include "trident/ops/loss.h"

namespace trident {
namespace {

using testing::f64;
using testing::random_tensor;
using testing::rel_err;

using ::testing::AllOf;
using ::testing::HasSubstr;
namespace ag = trident::autograd;

Tensor random_targets(std::int64_t n, std::int64_t vocab, std::uint64_t seed, DType dtype = DType::i64) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int64_t> dist(0, vocab - 1);
  Tensor t = Tensor::empty(Shape{n}, DType::i64);
  for (auto& v : t.span<std::int64_t>()) v = dist(gen);
  return t.to(dtype);
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

struct ThreadGuard {
  int saved = num_threads();
  ~ThreadGuard() { set_num_threads(saved); }
};

// Naive f64 per-row losses, lse and dlogits = (softmax - onehot) * g.
struct Naive {
  std::vector<double> losses, lse, dlogits;
};
Naive naive(const Tensor& logits, const Tensor& targets, const std::vector<double>& g, std::int64_t ignore) {
  const auto x = f64(logits);
  const auto t = targets.to(DType::i64).to_vector<std::int64_t>();
  const std::size_t V = static_cast<std::size_t>(logits.shape().last()), N = t.size();
  Naive n{std::vector<double>(N), std::vector<double>(N), std::vector<double>(N * V)};
  for (std::size_t r = 0; r < N; ++r) {
    const double* row = &x[r * V];
    double mx = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < V; ++j) mx = std::max(mx, row[j]);
    double s = 0;
    for (std::size_t j = 0; j < V; ++j) s += std::exp(row[j] - mx);
    n.lse[r] = mx + std::log(s);
    if (t[r] == ignore) continue;
    n.losses[r] = n.lse[r] - row[t[r]];
    for (std::size_t j = 0; j < V; ++j) {
      n.dlogits[r * V + j] = (std::exp(row[j] - n.lse[r]) - (static_cast<std::int64_t>(j) == t[r] ? 1.0 : 0.0)) * g[r];
    }
  }
  return n;
}

TEST(CrossEntropy, Gpt2SizedRowsMatchNaiveLogSoftmax) {
  const std::int64_t N = 9, V = 50257;  // odd vocabulary: vector body plus tail
  Tensor logits = random_tensor({N, V}, 1, -8.0, 8.0);
  Tensor targets = random_targets(N, V, 2);
  targets.span<std::int64_t>()[4] = -100;
  auto r = ops::cross_entropy(logits, targets);
  EXPECT_EQ(r.count, N - 1);
  ASSERT_EQ(r.losses.dtype(), DType::f32);
  std::vector<double> g(N);
  for (std::int64_t i = 0; i < N; ++i) g[static_cast<std::size_t>(i)] = 0.1 * static_cast<double>(i + 1);
  Naive n = naive(logits, targets, g, -100);
  EXPECT_LT(rel_err(f64(r.losses), n.losses), 2e-6);
  EXPECT_LT(rel_err(f64(r.lse), n.lse), 2e-6);
  EXPECT_EQ(f64(r.losses)[4], 0.0);
  Tensor dl = ops::cross_entropy_backward(logits, targets, r.lse, Tensor::from_vector<float>({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f}, {N}));
  EXPECT_LT(rel_err(f64(dl), n.dlogits), 1e-5);
  const auto dv = f64(dl);
  for (std::int64_t j = 0; j < V; ++j) ASSERT_EQ(dv[static_cast<std::size_t>(4 * V + j)], 0.0) << "ignored row";
}

TEST(CrossEntropy, LargeAndMaskedLogitsStayFinite) {
  // Logits around 100 overflow f32 exp without the max shift; -inf entries are masked classes.
  Tensor logits = random_tensor({3, 100}, 3, 80.0, 100.0, DType::f64);
  auto x = logits.span<double>();
  for (int j = 0; j < 100; j += 3) x[static_cast<std::size_t>(100 + j)] = -std::numeric_limits<double>::infinity();
  Tensor targets = Tensor::from_vector<std::int64_t>({5, 7, 99}, {3});
  Tensor f32_logits = logits.to(DType::f32);
  auto r = ops::cross_entropy(f32_logits, targets);
  Naive n = naive(f32_logits, targets, {1, 1, 1}, -100);
  for (double v : f64(r.losses)) EXPECT_TRUE(std::isfinite(v));
  EXPECT_LT(rel_err(f64(r.losses), n.losses), 1e-5);
  auto r64 = ops::cross_entropy(logits, targets);
  ASSERT_EQ(r64.losses.dtype(), DType::f64);
  EXPECT_LT(rel_err(f64(r64.losses), naive(logits, targets, {1, 1, 1}, -100).losses), 1e-13);
  Tensor dl = ops::cross_entropy_backward(f32_logits, targets, r.lse, Tensor::full({3}, 1.0));
  EXPECT_LT(rel_err(f64(dl), n.dlogits), 2e-5);  // lse is rounded at the logits' scale (ulp(100) = 8e-6)
  EXPECT_EQ(f64(dl)[100], 0.0);  // a masked class gets exactly no gradient
}

TEST(CrossEntropy, NanLogitPoisonsOnlyItsRow) {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor logits = random_tensor({3, 40}, 15, -1.0, 1.0, DType::f64);
    logits.span<double>()[40 + 17] = std::numeric_limits<double>::quiet_NaN();
    auto r = ops::cross_entropy(logits.to(dtype), Tensor::from_vector<std::int64_t>({1, 2, 3}, {3}));
    const auto l = f64(r.losses);
    EXPECT_FALSE(std::isnan(l[0]));
    EXPECT_TRUE(std::isnan(l[1])) << dtype_name(dtype);
    EXPECT_FALSE(std::isnan(l[2]));
  }
}

TEST(CrossEntropy, Bf16LogitsComputeInF32AndGradientIsBf16) {
  const std::int64_t N = 6, V = 1001;
  Tensor logits = random_tensor({N, V}, 4, -5.0, 5.0, DType::bf16);
  Tensor targets = random_targets(N, V, 5, DType::i32);
  auto r = ops::cross_entropy(logits, targets);
  ASSERT_EQ(r.losses.dtype(), DType::f32);
  std::vector<double> g(N, 0.5);
  Naive n = naive(logits, targets, g, -100);  // on the bf16-rounded values
  EXPECT_LT(rel_err(f64(r.losses), n.losses), 2e-6);
  Tensor dl = ops::cross_entropy_backward(logits, targets, r.lse, Tensor::full({N}, 0.5));
  ASSERT_EQ(dl.dtype(), DType::bf16);
  EXPECT_LT(rel_err(f64(dl), n.dlogits), 4e-3);  // bf16 rounding of the output only

  ag::Variable x(logits, true);
  ag::Variable loss = ag::cross_entropy(x, targets);
  EXPECT_EQ(loss.dtype(), DType::f32);
  loss.backward();
  EXPECT_EQ(x.grad().dtype(), DType::bf16);
}

TEST(CrossEntropy, ResultsDoNotDependOnThreadCount) {
  ThreadGuard guard;
  const std::int64_t N = 37, V = 3001;
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor logits = random_tensor({N, V}, 6, -6.0, 6.0, dtype);
    Tensor targets = random_targets(N, V, 7);
    targets.span<std::int64_t>()[3] = -100;
    Tensor g = random_tensor({N}, 8, 0.0, 1.0);
    set_num_threads(1);
    auto a = ops::cross_entropy(logits, targets);
    Tensor da = ops::cross_entropy_backward(logits, targets, a.lse, g);
    set_num_threads(2);
    auto b = ops::cross_entropy(logits, targets);
    Tensor db = ops::cross_entropy_backward(logits, targets, b.lse, g);
    EXPECT_TRUE(bit_equal(a.losses, b.losses)) << dtype_name(dtype);
    EXPECT_TRUE(bit_equal(a.lse, b.lse)) << dtype_name(dtype);
    EXPECT_TRUE(bit_equal(da, db)) << dtype_name(dtype);
  }
}

TEST(CrossEntropy, AllIgnoredMeanIsZeroWithZeroGradient) {
  ag::Variable x(random_tensor({4, 6}, 9, -1.0, 1.0, DType::f64), true);
  Tensor targets = Tensor::full(Shape{4}, -100.0, DType::i64);
  auto r = ops::cross_entropy(x.data(), targets);
  EXPECT_EQ(r.count, 0);
  ag::Variable loss = ag::cross_entropy(x, targets);
  EXPECT_EQ(loss.data().item(), 0.0);
  loss.backward();
  for (double v : f64(x.grad())) EXPECT_EQ(v, 0.0);
}

TEST(CrossEntropy, MicroBatchSharesOfTheGlobalTokenMeanAddUp) {
  // The global batch (8 rows, 2 ignored) split into micro-batches of 3 and 5 rows:
  // with normalizer = global token count, losses and gradients sum to the whole batch's mean.
  const std::int64_t V = 11;
  Tensor logits = random_tensor({8, V}, 10, -2.0, 2.0, DType::f64);
  Tensor targets = random_targets(8, V, 11);
  targets.span<std::int64_t>()[1] = -100;
  targets.span<std::int64_t>()[6] = -100;
  ag::Variable whole(logits, true);
  ag::Variable whole_loss = ag::cross_entropy(whole, targets);
  whole_loss.backward();

  ag::Variable a(logits.slice0(0, 3).clone(), true), b(logits.slice0(3, 8).clone(), true);
  const ag::CrossEntropyOptions share{.normalizer = 6.0};
  ag::Variable la = ag::cross_entropy(a, targets.slice0(0, 3), share);
  ag::Variable lb = ag::cross_entropy(b, targets.slice0(3, 8), share);
  la.backward();
  lb.backward();
  EXPECT_NEAR(la.data().item() + lb.data().item(), whole_loss.data().item(), 1e-14);
  auto gw = f64(whole.grad()), ga = f64(a.grad()), gb = f64(b.grad());
  ga.insert(ga.end(), gb.begin(), gb.end());
  EXPECT_LT(rel_err(ga, gw), 1e-14);

  ag::Variable s(logits, true);
  ag::Variable sum_loss = ag::cross_entropy(s, targets, {.reduction = ag::Reduction::sum});
  EXPECT_NEAR(sum_loss.data().item(), whole_loss.data().item() * 6.0, 1e-12);
}

TEST(CrossEntropy, TargetOutsideVocabularyNamesRowTargetAndV) {
  Tensor logits = random_tensor({4, 10}, 12, -1.0, 1.0);
  for (std::int64_t bad : {12, -5}) {
    Tensor targets = Tensor::from_vector<std::int32_t>({1, 2, -100, static_cast<std::int32_t>(bad)}, {4});
    try {
      ops::cross_entropy(logits, targets);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), AllOf(HasSubstr("cross_entropy"), HasSubstr(fmt::format("target {}", bad)),
                                     HasSubstr("row 3"), HasSubstr("V = 10")));
    }
  }
  // Through autograd, for 3-D logits: the row is the flattened position.
  Tensor logits3 = random_tensor({2, 2, 10}, 13, -1.0, 1.0);
  Tensor targets3 = Tensor::from_vector<std::int64_t>({0, 1, 10, 3}, {2, 2});
  EXPECT_THAT([&] { ag::cross_entropy(ag::Variable(logits3, true), targets3); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("target 10"), HasSubstr("row 2"))));
}

TEST(CrossEntropy, BadShapesAndDtypesAreNamed) {
  Tensor logits = random_tensor({4, 10}, 14, -1.0, 1.0);
  EXPECT_THAT([&] { ops::cross_entropy(logits, random_targets(5, 10, 1)); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("cross_entropy"), HasSubstr("[4, 10]"), HasSubstr("[5]"))));
  EXPECT_THAT([&] { ops::cross_entropy(logits, random_tensor({4}, 1, 0.0, 1.0)); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("cross_entropy"), HasSubstr("i32 or i64"))));
  EXPECT_THAT([&] { ops::cross_entropy(random_targets(4, 10, 1).view({2, 2}), random_targets(2, 10, 1)); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("cross_entropy"), HasSubstr("logits"))));
  auto r = ops::cross_entropy(logits, random_targets(4, 10, 2));
  EXPECT_THAT([&] { ops::cross_entropy_backward(logits, random_targets(4, 10, 2), r.lse, Tensor::full({4}, 1.0, DType::f64)); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("cross_entropy_backward"), HasSubstr("grad_losses"))));
}

}  // namespace
}  // namespace trident
