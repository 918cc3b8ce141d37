// Vocabulary-parallel cross-entropy under mpirun (2 and 4 ranks, the TP group =
// the world): each rank holds its slice of a padded vocabulary whose padding
// columns hold large garbage (1e4), and the loss and each rank's gradient columns
// must equal the fused cross-entropy's on the full, unpadded logits; padding
// columns get exactly zero gradient. Configurations cover every rank owning
// targets, ranks holding only padding, ignored rows, i32 targets, a custom
// ignore_index, a normaliser, and f64/f32/bf16/f16 logits.
#include "trident/parallel/tensor/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "testing/helpers.h"
#include "trident/autograd/autograd.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/ops/shape.h"

namespace trident::parallel {
namespace {

namespace ag = trident::autograd;
using testing::f64;
using testing::rel_err;

constexpr double kGarbage = 1e4;

struct Config {
  std::int64_t vocab = 0;   // real ids
  std::int64_t padded = 0;  // columns over all ranks, a multiple of the group size
  DType dtype = DType::f32;
  DType target_dtype = DType::i64;
  std::int64_t ignore_index = -100;
  double normalizer = 0;
  double loss_tol = 1e-6;
  double grad_tol = 1e-6;
};

// Every real id from 0 to vocab − 1 in steps that land in every rank's slice that has real
// columns, the first and last real id, and two ignored rows.
std::vector<std::int64_t> targets_for(const Config& c, int t) {
  std::vector<std::int64_t> y{0, c.vocab - 1, c.ignore_index};
  const std::int64_t chunk = c.padded / t;
  for (int q = 0; q < t; ++q) {
    if (q * chunk < c.vocab) y.push_back(std::min(c.vocab - 1, q * chunk + 1));
    if (q * chunk < c.vocab) y.push_back(std::min(c.vocab - 1, q * chunk + chunk - 1));
  }
  y.push_back(c.ignore_index);
  y.push_back(c.vocab / 2);
  return y;
}

class VocabParallelCrossEntropy : public ::testing::Test {
 protected:
  void SetUp() override { tp_ = dist::mpi_world(60.0); }

  // Runs one configuration and checks it against autograd::cross_entropy on the full logits.
  void expect_matches_full(const Config& c, std::uint64_t seed) {
    const int r = tp_->rank(), t = tp_->size();
    ASSERT_EQ(c.padded % t, 0);
    const std::vector<std::int64_t> ids = targets_for(c, t);
    const auto N = static_cast<std::int64_t>(ids.size());
    const Tensor y = Tensor::from_vector(ids, {N}).to(c.target_dtype);
    // Same seed on every rank: every rank knows the full logits, to build the reference.
    const Tensor z = testing::random_tensor({N, c.vocab}, seed, -4.0, 4.0, c.dtype);

    Variable z_full(z.clone(), true);
    Variable loss_full =
        ag::cross_entropy(z_full, y, ag::CrossEntropyOptions{c.ignore_index, ag::Reduction::mean, c.normalizer});
    loss_full.backward();

    const Tensor garbage = Tensor::full({N, c.padded - c.vocab}, kGarbage, c.dtype);
    const std::int64_t chunk = c.padded / t, begin = r * chunk;
    Variable z_local(split_dim(ops::concat({z, garbage}, 1), -1, r, t), true);
    tp_->reset_traffic();
    Variable loss = vocab_parallel_cross_entropy(z_local, y, begin, c.vocab, tp_, c.ignore_index, c.normalizer);
    loss.backward();

    const DType loss_dtype = c.dtype == DType::f64 ? DType::f64 : DType::f32;
    EXPECT_EQ(loss.dtype(), loss_dtype);
    EXPECT_EQ(loss.shape(), Shape{});
    const double expected = loss_full.data().item(), got = loss.data().item();
    EXPECT_LE(std::fabs(got - expected), c.loss_tol * std::fabs(expected)) << got << " vs " << expected;

    // One all-reduce MAX of [N] and one all-reduce SUM of [2N] (none at all for t = 1).
    const std::int64_t acc_bytes = loss_dtype == DType::f64 ? 8 : 4;
    EXPECT_EQ(tp_->traffic().calls, t > 1 ? 2 : 0);
    EXPECT_EQ(tp_->traffic().all_reduce_bytes, t > 1 ? 3 * N * acc_bytes : 0);

    // This rank's columns of the full gradient, zero-padded.
    const Tensor grad = z_local.grad();
    ASSERT_EQ(grad.dtype(), c.dtype);
    ASSERT_EQ(grad.shape(), (Shape{N, chunk}));
    const std::int64_t valid = std::clamp<std::int64_t>(c.vocab - begin, 0, chunk);
    const std::vector<double> g = f64(grad);
    const std::vector<double> ref = f64(z_full.grad());
    std::vector<double> got_valid, want_valid;
    for (std::int64_t i = 0; i < N; ++i) {
      for (std::int64_t j = 0; j < chunk; ++j) {
        const double v = g[static_cast<std::size_t>(i * chunk + j)];
        if (j < valid) {
          got_valid.push_back(v);
          want_valid.push_back(ref[static_cast<std::size_t>(i * c.vocab + begin + j)]);
        } else {
          ASSERT_EQ(v, 0.0) << "padding column " << begin + j << " of row " << i;
        }
      }
    }
    EXPECT_LE(rel_err(got_valid, want_valid), c.grad_tol) << "rank " << r << " of " << t;
  }

  TpGroup tp_;
};

// V = 8t − 3 real ids padded to 8t: every rank owns targets, the last rank has 3 padding columns.
Config every_rank_owns(const TpGroup& tp, DType dtype) {
  const std::int64_t t = tp->size();
  return Config{.vocab = 8 * t - 3, .padded = 8 * t, .dtype = dtype};
}

TEST_F(VocabParallelCrossEntropy, F64EveryRankOwnsTargets) {
  Config c = every_rank_owns(tp_, DType::f64);
  c.loss_tol = c.grad_tol = 1e-12;
  expect_matches_full(c, 1);
}

TEST_F(VocabParallelCrossEntropy, F32EveryRankOwnsTargets) { expect_matches_full(every_rank_owns(tp_, DType::f32), 2); }

// Megatron's padding, V' = 128·t: from t = 2 on, whole ranks hold nothing but padding.
TEST_F(VocabParallelCrossEntropy, F32MegatronPaddingLeavesRanksWithOnlyPadding) {
  expect_matches_full(Config{.vocab = 37, .padded = 128 * tp_->size(), .dtype = DType::f32}, 3);
}

TEST_F(VocabParallelCrossEntropy, F64MegatronPadding) {
  expect_matches_full(Config{.vocab = 37,
                             .padded = 128 * tp_->size(),
                             .dtype = DType::f64,
                             .loss_tol = 1e-12,
                             .grad_tol = 1e-12},
                      4);
}

TEST_F(VocabParallelCrossEntropy, I32TargetsCustomIgnoreIndexAndNormalizer) {
  Config c = every_rank_owns(tp_, DType::f32);
  c.target_dtype = DType::i32;
  c.ignore_index = -1;
  c.normalizer = 17.5;
  expect_matches_full(c, 5);
  c.dtype = DType::f64;
  c.loss_tol = c.grad_tol = 1e-12;
  expect_matches_full(c, 6);
}

// Reduced precision: the same f32 arithmetic on the same rounded logits; gradients
// are rounded once to the logits' dtype, so a value near a rounding boundary may differ by an ulp.
TEST_F(VocabParallelCrossEntropy, Bf16AndF16AccumulateInF32) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    Config c = every_rank_owns(tp_, dtype);
    c.grad_tol = 1e-2;
    expect_matches_full(c, 7);
  }
}

TEST_F(VocabParallelCrossEntropy, BadTargetIsAnErrorOnEveryRank) {
  const std::int64_t t = tp_->size(), chunk = 8;
  Variable z(Tensor::zeros({3, chunk}), true);
  const Tensor y = Tensor::from_vector<std::int64_t>({1, 8 * t - 3, 0}, {3});  // vocab_size 8t − 3 is out of range
  const std::string msg = testing::error_message(
      [&] { vocab_parallel_cross_entropy(z, y, tp_->rank() * chunk, 8 * t - 3, tp_); });
  EXPECT_NE(msg.find("row 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("target " + std::to_string(8 * t - 3)), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocab_size = " + std::to_string(8 * t - 3)), std::string::npos) << msg;
}

}  // namespace
}  // namespace trident::parallel
