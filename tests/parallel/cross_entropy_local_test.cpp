// Vocabulary-parallel cross-entropy in one process (tp = null: no communication):
// an f64 central-difference gradient check with padding, ignored rows, a
// normaliser and an upstream gradient; agreement with the fused cross-entropy
// on GPT-2-sized rows (the vectorised lanes and their remainders); the error
// for a bad target; an all-ignored batch; and bit-identical results with 1 and
// 2 threads.
#include "trident/parallel/tensor/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "testing/helpers.h"
#include "trident/autograd/autograd.h"
#include "trident/core/parallel.h"
#include "trident/ops/shape.h"

namespace trident::parallel {
namespace {

namespace ag = trident::autograd;
using testing::f64;
using testing::rel_err;

// [rows, vocab] real logits followed by `pad` columns of large garbage.
Tensor padded(const Tensor& z, std::int64_t pad, double garbage = 1e4) {
  return ops::concat({z, Tensor::full({z.size(0), pad}, garbage, z.dtype())}, 1);
}

TEST(VocabParallelCrossEntropyLocal, GradientMatchesCentralDifferencesInF64) {
  const std::int64_t N = 6, V = 9, pad = 3;
  Tensor z = padded(testing::random_tensor({N, V}, 11, -2.0, 2.0, DType::f64), pad, 30.0);
  const Tensor y = Tensor::from_vector<std::int64_t>({0, 8, -100, 4, 2, 8}, {N});
  for (double normalizer : {0.0, 7.0}) {
    // L = 2.5 · CE, so the upstream gradient is not 1.
    auto objective = [&](const Variable& x) {
      return ag::scale(vocab_parallel_cross_entropy(x, y, 0, V, nullptr, -100, normalizer), 2.5);
    };
    Variable x(z, true);
    objective(x).backward();
    const auto g = x.grad().span<double>();
    auto zv = z.span<double>();
    const double h = 1e-6;
    for (std::size_t k = 0; k < zv.size(); ++k) {
      const double saved = zv[k];
      ag::NoGradGuard no_grad;
      zv[k] = saved + h;
      const double fp = objective(Variable(z)).data().item();
      zv[k] = saved - h;
      const double fm = objective(Variable(z)).data().item();
      zv[k] = saved;
      const double numeric = (fp - fm) / (2 * h);
      EXPECT_NEAR(g[k], numeric, 1e-7 + 1e-5 * std::fabs(numeric)) << "element " << k << " normalizer " << normalizer;
      if (static_cast<std::int64_t>(k) % (V + pad) >= V) {
        EXPECT_EQ(g[k], 0.0) << "padding element " << k;
      }
    }
  }
}

// Rows long enough for the 32-lane loops, with a remainder, against the fused kernel.
TEST(VocabParallelCrossEntropyLocal, MatchesFusedCrossEntropyOnLongRows) {
  const std::int64_t N = 8, V = 1000, pad = 24;
  for (DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    const Tensor z = testing::random_tensor({N, V}, 12, -6.0, 6.0, dtype);
    const Tensor y = Tensor::from_vector<std::int32_t>({3, 999, 500, -100, 0, 31, 32, 968}, {N});
    Variable full(z.clone(), true);
    Variable ref = ag::cross_entropy(full, y);
    ref.backward();
    Variable x(padded(z, pad), true);
    Variable loss = vocab_parallel_cross_entropy(x, y, 0, V, nullptr);
    loss.backward();
    const double tol = dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 1e-6 : 1e-2;
    EXPECT_NEAR(loss.data().item(), ref.data().item(), (dtype == DType::bf16 ? 1e-6 : tol) * ref.data().item());
    EXPECT_LE(rel_err(f64(ops::slice(x.grad(), 1, 0, V)), f64(full.grad())), tol) << dtype_name(dtype);
    EXPECT_EQ(rel_err(f64(ops::slice(x.grad(), 1, V, V + pad)), std::vector<double>(static_cast<std::size_t>(N * pad), 0.0)), 0.0);
  }
}

TEST(VocabParallelCrossEntropyLocal, BadTargetErrorNamesRowTargetAndVocabSize) {
  Variable x(Tensor::zeros({4, 16}), true);
  for (std::int64_t bad : {std::int64_t{13}, std::int64_t{-5}}) {
    // 13 is a column of the slice but a padding id: still out of range.
    const Tensor y = Tensor::from_vector<std::int64_t>({1, -100, 2, bad}, {4});
    const std::string msg = testing::error_message([&] { vocab_parallel_cross_entropy(x, y, 0, 13, nullptr); });
    EXPECT_NE(msg.find("row 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("target " + std::to_string(bad)), std::string::npos) << msg;
    EXPECT_NE(msg.find("vocab_size = 13"), std::string::npos) << msg;
  }
}

TEST(VocabParallelCrossEntropyLocal, AllRowsIgnoredGivesZeroLossAndGradient) {
  Variable x(testing::random_tensor({3, 8}, 13), true);
  Variable loss = vocab_parallel_cross_entropy(x, Tensor::full({3}, -100.0, DType::i64), 0, 6, nullptr);
  loss.backward();
  EXPECT_EQ(loss.data().item(), 0.0);
  for (double v : f64(x.grad())) EXPECT_EQ(v, 0.0);
}

// Every row is computed by one thread, so the thread count cannot change a bit.
TEST(VocabParallelCrossEntropyLocal, ThreadCountDoesNotChangeABit) {
  const int saved = num_threads();
  const std::int64_t N = 64, V = 5000, pad = 120;
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const Tensor z = padded(testing::random_tensor({N, V}, 14, -8.0, 8.0, dtype), pad);
    std::vector<std::int64_t> ids(N);
    for (std::int64_t i = 0; i < N; ++i) ids[static_cast<std::size_t>(i)] = i % 7 == 3 ? -100 : (i * 613) % V;
    const Tensor y = Tensor::from_vector(ids, {N});
    Tensor loss[2], grad[2];
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Variable x(z, true);
      Variable l = vocab_parallel_cross_entropy(x, y, 0, V, nullptr);
      l.backward();
      loss[threads - 1] = l.data();
      grad[threads - 1] = x.grad();
    }
    set_num_threads(saved);
    EXPECT_EQ(std::memcmp(loss[0].raw_data(), loss[1].raw_data(), dtype_size(loss[0].dtype())), 0) << dtype_name(dtype);
    EXPECT_EQ(std::memcmp(grad[0].raw_data(), grad[1].raw_data(), grad[0].nbytes()), 0)
        << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace trident::parallel
