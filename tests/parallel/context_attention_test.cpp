// Context-parallel attention under mpirun (2 and 4 ranks, the cp group = the world): each rank holds its two
// chunks of q, k and v (chunk r and its mirror), and parallel::context::context_attention, ring and
// all-to-all, gives its rows of the whole sequence's attention and of dq, dk and dv, against
// ops::attention on the whole sequence on every rank. Causal, bidirectional with key padding, a sliding
// window across chunks, packed documents across chunk boundaries, GQA and dropout; f64, f32 and bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "trident/autograd/autograd.h"
#include "trident/core/error.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/ops/shape.h"
#include "trident/parallel/context/attention.h"

namespace trident::parallel::context {
namespace {

namespace ag = trident::autograd;
using autograd::Variable;

Tensor random(Shape s, std::uint64_t seed) {
  std::mt19937_64 gen(seed);  // same seed → same tensor on every rank
  std::uniform_real_distribution<double> d(-1, 1);
  Tensor t = Tensor::empty(std::move(s), DType::f64);
  for (double& x : t.span<double>()) x = d(gen);
  return t;
}

// Largest error relative to the reference's largest element.
double max_error(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  const auto a = got.to_vector<double>(), b = want.to_vector<double>();
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return err / std::max(scale, 1e-300);
}

struct Case {
  std::string name;
  bool causal = true;
  std::int64_t window = 0;
  bool key_padding = false;
  bool documents = false;
  double dropout = 0;
};

class ContextAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override { world_ = dist::mpi_world(60.0); }

  // Runs `c` with `algorithm` in `dtype` and compares with the whole-sequence attention.
  void check(const Case& c, bool all_to_all, DType dtype, double tol) {
    SCOPED_TRACE(fmt::format("{} {} {}", c.name, all_to_all ? "all_to_all" : "ring", dtype_name(dtype)));
    const int n = world_->size();
    const std::int64_t B = 2, L = 6, Tg = 2 * n * L, H = 2 * n, Hkv = n, D = 8;
    const ChunkLayout layout{world_->rank(), n, Tg};
    const Tensor q0 = random({B, Tg, H, D}, 1).to(dtype), k0 = random({B, Tg, Hkv, D}, 2).to(dtype);
    const Tensor v0 = random({B, Tg, Hkv, D}, 3).to(dtype), g0 = random({B, Tg, H, D}, 4).to(dtype);
    ops::AttentionOptions o;
    o.causal = c.causal;
    o.window = c.window;
    if (c.key_padding) {  // sample 1: its last 5 keys padding (across the last chunk boundary)
      std::vector<std::int64_t> m(static_cast<std::size_t>(B * Tg), 1);
      for (std::int64_t s = Tg - 5; s < Tg; ++s) m[static_cast<std::size_t>(Tg + s)] = 0;
      o.key_mask = Tensor::from_vector<std::int64_t>(m, {B, Tg});
    }
    if (c.documents) {  // documents opening at 3, L + 2 (crossing a chunk boundary) and 3L, and in sample 1 at 1
      std::vector<std::int32_t> starts(static_cast<std::size_t>(B * Tg));
      for (std::int64_t b = 0; b < B; ++b) {
        std::int32_t at = 0;
        for (std::int64_t t = 0; t < Tg; ++t) {
          if ((b == 0 && (t == 3 || t == L + 2 || t == 3 * L)) || (b == 1 && t == 1)) at = static_cast<std::int32_t>(t);
          starts[static_cast<std::size_t>(b * Tg + t)] = at;
        }
      }
      o.document_starts = Tensor::from_vector<std::int32_t>(starts, {B, Tg});
    }
    if (c.dropout > 0) o.dropout = {c.dropout, CounterRng(7, "test/context/attention"), 5, 2, H + 3};
    // The whole sequence on every rank.
    Variable q(q0.clone(), true), k(k0.clone(), true), v(v0.clone(), true);
    Variable out = ag::attention(q, k, v, o);
    ag::sum(ag::mul(out, Variable(g0, false))).backward();
    // This rank's chunks.
    Variable lq(layout.take(q0, 1), true), lk(layout.take(k0, 1), true), lv(layout.take(v0, 1), true);
    Variable lout = context_attention(lq, lk, lv, o, {world_, all_to_all, layout, "test"});
    ag::sum(ag::mul(lout, Variable(layout.take(g0, 1), false))).backward();
    EXPECT_LE(max_error(lout.data(), layout.take(out.data(), 1)), tol) << "out";
    EXPECT_LE(max_error(lq.grad(), layout.take(q.grad(), 1)), tol) << "dq";
    EXPECT_LE(max_error(lk.grad(), layout.take(k.grad(), 1)), tol) << "dk";
    EXPECT_LE(max_error(lv.grad(), layout.take(v.grad(), 1)), tol) << "dv";
  }

  std::shared_ptr<dist::Communicator> world_;
};

const Case kCases[] = {
    {"causal"},
    {"bidirectional_key_padding", false, 0, true},
    {"window_across_chunks", true, 5},
    {"documents_across_chunks", true, 0, false, true},
    {"documents_window_padding_dropout", true, 7, true, true, 0.2},
    {"dropout", true, 0, false, false, 0.1},
};

TEST_F(ContextAttentionTest, RingFollowsTheWholeSequence) {
  for (const Case& c : kCases) {
    check(c, false, DType::f64, 1e-12);
    check(c, false, DType::f32, 1e-5);
  }
  check(kCases[0], false, DType::bf16, 3e-2);
}

TEST_F(ContextAttentionTest, AllToAllFollowsTheWholeSequence) {
  for (const Case& c : kCases) {
    check(c, true, DType::f64, 1e-12);
    check(c, true, DType::f32, 1e-5);
  }
  check(kCases[0], true, DType::bf16, 3e-2);
}

// The chunk layout: rank r holds chunk r and its mirror, and the runs and positions say so.
TEST_F(ContextAttentionTest, ChunkLayoutHoldsAChunkAndItsMirror) {
  const int n = world_->size(), r = world_->rank();
  const ChunkLayout layout{r, n, 8 * n};  // chunks of 4
  EXPECT_EQ(layout.chunk(), 4);
  EXPECT_EQ(layout.global_position(0), 4 * r);
  EXPECT_EQ(layout.global_position(4), 4 * (2 * n - 1 - r));
  const auto runs = layout.runs(2, 4);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].global_begin, 4 * r + 2);
  EXPECT_EQ(runs[0].length, 2);
  EXPECT_EQ(runs[1].local_begin, 4);
  EXPECT_EQ(runs[1].global_begin, 4 * (2 * n - 1 - r));
  EXPECT_EQ(layout.positions(3, 2).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{4 * r + 3, 4 * (2 * n - 1 - r)}));
}

// Bad inputs: heads the all-to-all cannot scatter, an additive mask, local tensors of the wrong length.
TEST_F(ContextAttentionTest, RefusesWhatItCannotSplit) {
  const int n = world_->size();
  const std::int64_t L = 2, Tg = 2 * n * L;
  const ChunkLayout layout{world_->rank(), n, Tg};
  const auto refuses = [&](const Tensor& q, const Tensor& kv, const ops::AttentionOptions& o, bool a2a,
                           const std::string& what) {
    try {
      context_attention(Variable(q, false), Variable(kv, false), Variable(kv, false), o,
                        {world_, a2a, layout, "layer.3"});
      ADD_FAILURE() << "accepted " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const Tensor q = random({1, 2 * L, 2 * n + 1, 4}, 1), kv = random({1, 2 * L, 1, 4}, 2);
  refuses(q, kv, {}, true,
          fmt::format("dist.context_parallel_algorithm=all_to_all scatters the heads: the {} query heads (1 key/value "
                      "heads) per tensor-parallel rank must divide by dist.context_parallel_size={}",
                      2 * n + 1, n));
  ops::AttentionOptions masked;
  masked.mask = random({Tg, Tg}, 3);
  refuses(q, kv, masked, false, "context-parallel attention in layer.3: an additive attention mask is not supported");
  refuses(random({1, L, 2, 4}, 1), random({1, L, 2, 4}, 1), {}, false, "must be this rank's");
}

}  // namespace
}  // namespace trident::parallel::context
