// DeepSpeed's block-sparse layouts (models/sparse_attention.h; the specification is
// docs/plans/block-sparse-attention.md): the worked examples of 4 blocks and the regression cases written
// out by hand from DeepSpeed's algorithms; random blocks reproducible from the seed; every mode's layout,
// given to ops::attention, equals dense attention under the same mask to 1e-12 in f64, forward and
// gradients; bad values refused with the key named.
#include "trident/models/sparse_attention.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "trident/autograd/autograd.h"
#include "trident/core/error.h"
#include "trident/ops/attention.h"
#include "trident/ops/shape.h"

namespace trident::models {
namespace {

namespace ag = trident::autograd;
using autograd::Variable;

// Head h of a layout as rows of '0'/'1'.
std::vector<std::string> rows_of(const Tensor& layout, std::int64_t h = 0) {
  const std::int64_t nb = layout.size(1);
  std::vector<std::string> out;
  for (std::int64_t r = 0; r < nb; ++r) {
    std::string row;
    for (std::int64_t c = 0; c < nb; ++c) row += layout.data<std::uint8_t>()[(h * nb + r) * nb + c] ? '1' : '0';
    out.push_back(row);
  }
  return out;
}

SparseAttentionSpec spec(std::string mode, std::int64_t block = 4) {
  SparseAttentionSpec s;
  s.mode = std::move(mode);
  s.block = block;
  return s;
}

using Rows = std::vector<std::string>;

TEST(SparseLayouts, WorkedExamplesOfFourBlocks) {
  EXPECT_EQ(rows_of(block_layout(spec("dense"), 2, 16)), (Rows{"1111", "1111", "1111", "1111"}));
  SparseAttentionSpec fixed = spec("fixed");
  fixed.num_local_blocks = 2;
  EXPECT_EQ(rows_of(block_layout(fixed, 2, 16)), (Rows{"1101", "1101", "0111", "0111"}));
  fixed.attention = "unidirectional";
  EXPECT_EQ(rows_of(block_layout(fixed, 2, 16)), (Rows{"1000", "1100", "0110", "0111"}));
  fixed.attention = "bidirectional";
  fixed.horizontal_global_attention = true;
  EXPECT_EQ(rows_of(block_layout(fixed, 2, 16)), (Rows{"1101", "1111", "0111", "1111"}));

  SparseAttentionSpec longformer = spec("bslongformer");
  EXPECT_EQ(rows_of(block_layout(longformer, 2, 16)), (Rows{"1111", "1110", "1111", "1011"}));
  longformer.attention = "unidirectional";
  EXPECT_EQ(rows_of(block_layout(longformer, 2, 16)), (Rows{"1000", "1100", "1110", "1011"}));

  SparseAttentionSpec variable = spec("variable");
  variable.local_window_blocks = {1, 2};
  EXPECT_EQ(rows_of(block_layout(variable, 2, 16)), (Rows{"1000", "1110", "1110", "1001"}));
  variable.attention = "unidirectional";
  EXPECT_EQ(rows_of(block_layout(variable, 2, 16)), (Rows{"1000", "1100", "1110", "1001"}));
  variable.attention = "bidirectional";
  variable.horizontal_global_attention = true;
  EXPECT_EQ(rows_of(block_layout(variable, 2, 16)), (Rows{"1111", "1110", "1110", "1001"}));
}

// BigBird's deterministic part is bslongformer's with global block 0; each row then gains one random
// column (which adds [1, 3] or [3, 1] or nothing new).
TEST(SparseLayouts, BigBirdAddsRandomBlocksReproducibly) {
  SparseAttentionSpec bigbird = spec("bigbird");
  bigbird.num_random_blocks = 1;
  int extra = 0;
  for (std::int64_t seed = 0; seed < 40; ++seed) {
    bigbird.seed = seed;
    const Rows got = rows_of(block_layout(bigbird, 2, 16));
    EXPECT_EQ(got[0], "1111");
    EXPECT_EQ(got[2], "1111");
    EXPECT_TRUE(got[1] == "1110" || got[1] == "1111") << got[1];
    EXPECT_TRUE(got[3] == "1011" || got[3] == "1111") << got[3];
    extra += (got[1] == "1111") + (got[3] == "1111");
    EXPECT_EQ(rows_of(block_layout(bigbird, 2, 16)), got) << "seed " << seed << " drew differently twice";
  }
  EXPECT_GT(extra, 5);   // each extra block has probability 1/4: about 20 of the 80 rows
  EXPECT_LT(extra, 40);
  // Per head: different draws for different heads (over 64 blocks, two heads agreeing would be a bug).
  SparseAttentionSpec wide = spec("bigbird", 1);
  wide.num_random_blocks = 3;
  wide.different_layout_per_head = true;
  const Tensor layout = block_layout(wide, 2, 64);
  ASSERT_EQ(layout.size(0), 2);
  EXPECT_NE(rows_of(layout, 0), rows_of(layout, 1));
}

// DeepSpeed's behaviours worth keeping: unidirectional fixed with 2 global blocks sets blocks above the
// diagonal (the causal rule hides them element by element); a short last window gets its own global
// column; an even sliding window of 4 blocks is 5 wide.
TEST(SparseLayouts, RegressionCasesFromDeepSpeedsAlgorithms) {
  SparseAttentionSpec fixed = spec("fixed", 1);
  fixed.num_local_blocks = 4;
  fixed.num_global_blocks = 2;
  fixed.attention = "unidirectional";
  const Rows uni = rows_of(block_layout(fixed, 1, 8));
  EXPECT_EQ(uni[2][3], '1');
  EXPECT_EQ(uni[6][7], '1');
  fixed.num_global_blocks = 1;
  fixed.attention = "bidirectional";
  const Rows tail = rows_of(block_layout(fixed, 1, 5));
  for (const std::string& row : tail) EXPECT_EQ(row[4], '1') << "column 4 is the short window's global block";
  SparseAttentionSpec longformer = spec("bslongformer", 1);
  longformer.num_sliding_window_blocks = 4;
  longformer.global_block_indices = {};
  EXPECT_EQ(rows_of(block_layout(longformer, 1, 8))[4], "00111110");
}

// Every mode's layout in ops::attention equals dense attention with the additive mask (−inf outside the
// layout) it stands for: forward and dq, dk, dv in f64, head by head, causal and not.
TEST(SparseLayouts, EveryModeMatchesDenseAttentionUnderItsMask) {
  const std::int64_t B = 2, T = 24, H = 2, D = 8, block = 4;
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> u(-1, 1);
  const auto random = [&](Shape s) {
    Tensor t = Tensor::empty(std::move(s), DType::f64);
    for (double& x : t.span<double>()) x = u(gen);
    return t;
  };
  const Tensor q = random({B, T, H, D}), k = random({B, T, H, D}), v = random({B, T, H, D}), g = random({B, T, H, D});
  std::vector<SparseAttentionSpec> modes;
  for (const char* m : {"dense", "fixed", "variable", "bigbird", "bslongformer"}) {
    SparseAttentionSpec s = spec(m, block);
    s.num_local_blocks = 2;
    s.num_random_blocks = m == std::string("variable") || m == std::string("bigbird") ? 1 : 0;
    s.local_window_blocks = {2, 1};
    s.different_layout_per_head = true;
    modes.push_back(s);
  }
  for (const SparseAttentionSpec& s : modes) {
    for (bool causal : {true, false}) {
      SCOPED_TRACE(s.mode + (causal ? " causal" : " bidirectional"));
      const Tensor layout = block_layout(s, H, T);
      ops::AttentionOptions sparse;
      sparse.causal = causal;
      sparse.block_layout = layout;
      sparse.block = block;
      Variable sq(q.clone(), true), sk(k.clone(), true), sv(v.clone(), true);
      Variable out = ag::attention(sq, sk, sv, sparse);
      ag::sum(ag::mul(out, Variable(g, false))).backward();
      for (std::int64_t h = 0; h < H; ++h) {
        const auto head = [&](const Tensor& x) { return ops::slice(x, 2, h, h + 1); };
        Tensor mask = Tensor::empty({T, T}, DType::f64);
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t j = 0; j < T; ++j)
            mask.data<double>()[t * T + j] =
                layout.data<std::uint8_t>()[(h * (T / block) + t / block) * (T / block) + j / block]
                    ? 0.0
                    : -std::numeric_limits<double>::infinity();
        ops::AttentionOptions dense;
        dense.causal = causal;
        dense.mask = mask;
        Variable dq(head(q), true), dk(head(k), true), dv(head(v), true);
        Variable ref = ag::attention(dq, dk, dv, dense);
        ag::sum(ag::mul(ref, Variable(head(g), false))).backward();
        const auto close = [](const Tensor& a, const Tensor& b, const char* what) {
          const auto x = a.to_vector<double>(), y = b.to_vector<double>();
          ASSERT_EQ(x.size(), y.size());
          for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-12) << what << " at " << i;
        };
        close(head(out.data()), ref.data(), "out");
        close(head(sq.grad()), dq.grad(), "dq");
        close(head(sk.grad()), dk.grad(), "dk");
        close(head(sv.grad()), dv.grad(), "dv");
      }
    }
  }
}

TEST(SparseLayouts, BadValuesNameTheKey) {
  const auto refuses = [](SparseAttentionSpec s, std::int64_t max_seq_len, const std::string& what) {
    try {
      validate_sparse_attention(s, 4, max_seq_len);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refuses(spec("strided"), 64,
          "model.sparse_attention.mode='strided' is not one of dense, fixed, variable, bigbird, bslongformer");
  refuses(spec("fixed", 24), 64, "model.sparse_attention.block=24 must divide the sequence length 64");
  SparseAttentionSpec fixed = spec("fixed");
  fixed.num_local_blocks = 3;
  fixed.num_global_blocks = 2;
  refuses(fixed, 64, "num_local_blocks=3 must be a positive multiple of num_global_blocks=2");
  SparseAttentionSpec patterns = spec("fixed");
  patterns.num_different_global_patterns = 2;
  refuses(patterns, 64, "num_different_global_patterns=2 needs different_layout_per_head = true");
  SparseAttentionSpec bigbird = spec("bigbird");
  bigbird.num_random_blocks = 20;
  refuses(bigbird, 64, "model.sparse_attention.num_random_blocks=20 must be in [0, 16]");
  SparseAttentionSpec ends = spec("bslongformer");
  ends.global_block_indices = {0, 4};
  ends.global_block_end_indices = {2};
  refuses(ends, 64, "global_block_end_indices has 1 entries for 2 global_block_indices");
  SparseAttentionSpec horizontal = spec("fixed");
  horizontal.attention = "unidirectional";
  horizontal.horizontal_global_attention = true;
  refuses(horizontal, 64, "horizontal_global_attention needs attention = bidirectional");
  SparseAttentionSpec sideways = spec("bigbird");
  sideways.attention = "sideways";
  refuses(sideways, 64, "model.sparse_attention.attention='sideways' is not one of bidirectional, unidirectional");
}

}  // namespace
}  // namespace trident::models
