// Tensor-parallel layers under mpirun (2 and 4 ranks; the TP group is the
// world): every layer built over the group starts from exactly the slices of
// the unsharded layer (same seed) and gives the unsharded layer's output, input
// gradient and — piece by piece — parameter gradients, with and without
// sequence parallelism, with dropout on. Relative tolerance 1e-6 in fp32.
#include <gtest/gtest.h>

#include "testing/helpers.h"
#include "trident/autograd/autograd.h"
#include "trident/core/convert.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/models/transformer_lm.h"
#include "trident/nn/transformer.h"
#include "trident/ops/shape.h"

namespace trident::nn {
namespace {

namespace ag = trident::autograd;
using models::TransformerSpec;
using testing::f64;
using testing::random_tensor;
using testing::rel_err;

constexpr double kTol = 1e-6;       // one layer
constexpr double kModelTol = 1e-5;  // the whole model: embeddings, 2 blocks, head and loss composed in fp32

// The sub-box of `t` at `offsets` of `extent`.
Tensor box(Tensor t, const std::vector<std::int64_t>& offsets, const Shape& extent) {
  for (std::size_t d = 0; d < offsets.size(); ++d) {
    if (offsets[d] != 0 || extent[d] != t.shape()[d])
      t = ops::slice(t, static_cast<std::int64_t>(d), offsets[d], offsets[d] + extent[d]);
  }
  return t;
}

// The error of `got` against `expected`, relative to the larger of expected's norm and `floor`.
double err_above(const std::vector<double>& got, const std::vector<double>& expected, double floor) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - expected[i]) * (got[i] - expected[i]);
    den += expected[i] * expected[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), floor);
}

// Every parameter's gradient in `sharded` equals its pieces of the full
// module's gradient, and is zero outside its pieces (vocabulary padding).
// Relative to the gradient's norm, or to a tenth of the module's largest
// gradient norm when that is larger: a gradient that is a sum of cancelling
// terms keeps only the terms' absolute precision. (Qwen2's key bias: without
// RoPE its gradient would be exactly zero, as softmax ignores a shift shared by
// every key; with RoPE it is what is left, about 5% of the largest gradient,
// and a GEMM blocked differently for the sharded width moves it by 1.3e-6 of
// its norm.)
void expect_same_parameter_grads(const Module& full, const Module& sharded, double tol = kTol) {
  auto fp = full.parameters();
  auto sp = sharded.parameters();
  ASSERT_EQ(fp.size(), sp.size());
  double largest = 0;
  for (const Parameter* p : fp) {
    double sq = 0;
    for (double v : f64(p->var.grad())) sq += v * v;
    largest = std::max(largest, std::sqrt(sq));
  }
  const double floor = 0.1 * largest;
  for (std::size_t i = 0; i < fp.size(); ++i) {
    const Parameter& f = *fp[i];
    const Parameter& s = *sp[i];
    ASSERT_EQ(f.name, s.name);
    ASSERT_TRUE(s.var.grad().defined()) << s.name;
    const Tensor fg = f.var.grad(), sg = s.var.grad();
    if (s.shard.is_whole()) {
      EXPECT_LE(err_above(f64(sg), f64(fg), floor), tol) << s.name;
      continue;
    }
    // The full gradient's pieces placed where this rank holds them; zero elsewhere (padding).
    Tensor expected = Tensor::zeros(sg.shape(), sg.dtype());
    for (const ShardPiece& piece : s.shard.pieces)
      copy_box_into(expected, box(fg, piece.global_offsets, piece.extent), piece.local_offsets);
    EXPECT_LE(err_above(f64(sg), f64(expected), floor), tol) << s.name;
    Tensor outside = sg.clone();
    for (const ShardPiece& piece : s.shard.pieces)
      copy_box_into(outside, Tensor::zeros(piece.extent, outside.dtype()), piece.local_offsets);
    for (double v : f64(outside)) ASSERT_EQ(v, 0.0) << s.name << " has gradient in its padding";
  }
}

// Parameter values: the sharded module starts from the slices of the full one.
void expect_same_initial_values(const Module& full, const Module& sharded) {
  auto fp = full.parameters();
  auto sp = sharded.parameters();
  ASSERT_EQ(fp.size(), sp.size());
  for (std::size_t i = 0; i < fp.size(); ++i) {
    if (sp[i]->shard.is_whole()) {
      EXPECT_EQ(f64(sp[i]->var.data()), f64(fp[i]->var.data())) << sp[i]->name;
      continue;
    }
    for (const ShardPiece& piece : sp[i]->shard.pieces) {
      EXPECT_EQ(f64(box(sp[i]->var.data(), piece.local_offsets, piece.extent)),
                f64(box(fp[i]->var.data(), piece.global_offsets, piece.extent)))
          << sp[i]->name;
    }
  }
}

class TensorParallelLayers : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = dist::mpi_world(60.0);
    tp_.group = world_;
    r_ = world_->rank();
    t_ = world_->size();
  }
  TensorParallel sp() const { return TensorParallel{world_, true}; }
  ForwardContext training(std::int64_t B) const {
    ForwardContext ctx;
    ctx.training = true;
    ctx.seed = 11;
    ctx.step = 3;
    ctx.global_batch = B;
    return ctx;
  }
  std::shared_ptr<dist::Communicator> world_;
  TensorParallel tp_;
  int r_ = 0, t_ = 1;
};

// Runs `forward` on the full and the sharded module with the same input and
// upstream gradient; under sequence parallelism the sharded module sees (and
// returns) this rank's slice of the sequence (dimension 1).
template <typename A, typename B, typename F>
void compare(const A& full, const B& sharded, const Tensor& x0, const Shape& out_shape, bool seq_split, int r, int t,
             F forward, std::int64_t in_split_last = 0) {
  const Tensor g0 = random_tensor(out_shape, 99);
  Variable xf(x0.clone(), true);
  Variable yf = forward(full, xf);
  ag::sum(ag::mul(yf, Variable(g0, false))).backward();

  Tensor xs0 = x0;
  if (seq_split) xs0 = parallel::split_dim(x0, 1, r, t);
  if (in_split_last) xs0 = parallel::split_dim(x0, -1, r, t);
  Variable xs(xs0.clone(), true);
  Variable ys = forward(sharded, xs);
  const Tensor gs = seq_split ? parallel::split_dim(g0, 1, r, t) : g0;
  ag::sum(ag::mul(ys, Variable(gs, false))).backward();

  const Tensor yref = seq_split ? parallel::split_dim(yf.data(), 1, r, t) : yf.data();
  EXPECT_LE(rel_err(f64(ys.data()), f64(yref)), kTol) << "output";
  Tensor dxref = xf.grad();
  if (seq_split) dxref = parallel::split_dim(dxref, 1, r, t);
  if (in_split_last) dxref = parallel::split_dim(dxref, -1, r, t);
  EXPECT_LE(rel_err(f64(xs.grad()), f64(dxref)), kTol) << "input gradient";
  expect_same_parameter_grads(full, sharded);
}

// The sequence-parallel region operators on [B, T, D] with exactly predictable
// values: element (b, s, d) of rank r's input is 1000·r + 100·b + 10·s + d.
TEST_F(TensorParallelLayers, SequenceRegionOperatorsSplitGatherAndReduceAlongTheSequence) {
  const int B = 2, T = 2 * t_, D = 3;
  auto filled = [](int b_n, int t_n, int d_n, double rank_term, int s0) {
    std::vector<double> v;
    for (int b = 0; b < b_n; ++b)
      for (int s = 0; s < t_n; ++s)
        for (int d = 0; d < d_n; ++d) v.push_back(rank_term + 100.0 * b + 10.0 * (s0 + s) + d);
    return Tensor::from_vector(v, {b_n, t_n, d_n});
  };
  const int c = T / t_;
  // scatter_to_sp keeps this rank's tokens; its backward all-gathers the gradient.
  Variable x(filled(B, T, D, 0, 0), true);
  Variable y = parallel::scatter_to_sp(x, world_);
  EXPECT_EQ(f64(y.data()), f64(filled(B, c, D, 0, r_ * c)));
  y.backward(filled(B, c, D, 1000.0 * r_, r_ * c));
  std::vector<double> want;
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < T; ++s)
      for (int d = 0; d < D; ++d) want.push_back(1000.0 * (s / c) + 100.0 * b + 10.0 * s + d);
  EXPECT_EQ(f64(x.grad()), want);
  // gather_from_sp all-gathers; its backward reduce-scatters (sums over ranks, keeps this rank's tokens).
  Variable part(filled(B, c, D, 1000.0 * r_, r_ * c), true);
  Variable whole = parallel::gather_from_sp(part, world_);
  EXPECT_EQ(f64(whole.data()), want);
  whole.backward(filled(B, T, D, 1000.0 * r_, 0));
  const double rank_sum = 1000.0 * t_ * (t_ - 1) / 2.0;
  std::vector<double> summed;
  for (double v : f64(filled(B, c, D, 0, r_ * c))) summed.push_back(t_ * v + rank_sum);
  EXPECT_EQ(f64(part.grad()), summed);
  // reduce_scatter_to_sp sums over ranks and keeps this rank's tokens; backward all-gathers.
  Variable full(filled(B, T, D, 1000.0 * r_, 0), true);
  Variable mine = parallel::reduce_scatter_to_sp(full, world_);
  EXPECT_EQ(f64(mine.data()), summed);
  mine.backward(filled(B, c, D, 1000.0 * r_, r_ * c));
  EXPECT_EQ(f64(full.grad()), want);
}

TEST_F(TensorParallelLayers, ColumnParallelLinearWithGatheredOutput) {
  LinearOptions o{16, 8 * t_, true, WeightLayout::out_in, 0.5};
  Linear full("fc", o);
  o.gather_output = true;
  ColumnParallelLinear col("fc", o, tp_);
  full.initialize(5);
  col.initialize(5);
  expect_same_initial_values(full, col);
  compare(full, col, random_tensor({2, 3, 16}, 1), Shape{2, 3, 8 * t_}, false, r_, t_,
          [](const Linear& m, const Variable& x) { return m.forward(x, ForwardContext{}); });
}

TEST_F(TensorParallelLayers, FusedColumnParallelLinearKeepsWholeSegmentsPerRank) {
  // GPT-2's c_attn: [in, q|k|v] in Conv1D layout; rank r holds chunk r of each of q, k and v.
  const std::int64_t D = 4 * t_;
  LinearOptions o{D, 3 * D, true, WeightLayout::in_out, 0.5};
  o.out_segments = {D, D, D};
  Linear full("c_attn", o);
  ColumnParallelLinear col("c_attn", o, tp_);
  full.initialize(6);
  col.initialize(6);
  expect_same_initial_values(full, col);
  const Tensor x0 = random_tensor({2, 5, D}, 2);
  Variable y = col.forward(Variable(x0, false), ForwardContext{});
  const Tensor yf = full.forward(Variable(x0, false), ForwardContext{}).data();
  const std::int64_t c = D / t_;
  const Tensor expect = ops::concat({ops::slice(yf, -1, r_ * c, (r_ + 1) * c), ops::slice(yf, -1, D + r_ * c, D + (r_ + 1) * c),
                                     ops::slice(yf, -1, 2 * D + r_ * c, 2 * D + (r_ + 1) * c)},
                                    -1);
  EXPECT_LE(rel_err(f64(y.data()), f64(expect)), kTol);
}

TEST_F(TensorParallelLayers, RowParallelLinearAddsItsBiasAfterTheReduction) {
  for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
    LinearOptions o{8 * t_, 12, true, layout, 0.5};
    Linear full("proj", o);
    RowParallelLinear row("proj", o, tp_);
    full.initialize(7);
    row.initialize(7);
    // A nonzero bias, so that adding it once per rank would show.
    for (Module* m : std::initializer_list<Module*>{&full, &row}) {
      Tensor b = m->find_parameter("proj.bias")->var.data();
      fill_value(b, 0.25);
    }
    compare(full, row, random_tensor({2, 3, 8 * t_}, 3), Shape{2, 3, 12}, false, r_, t_,
            [](const Linear& m, const Variable& x) { return m.forward(x, ForwardContext{}); }, /*in_split_last=*/1);
  }
}

TEST_F(TensorParallelLayers, RowParallelLinearUnderSequenceParallelism) {
  LinearOptions o{8 * t_, 12, true, WeightLayout::out_in, 0.5};
  Linear full("proj", o);
  RowParallelLinear row("proj", o, sp());
  full.initialize(8);
  row.initialize(8);
  for (Module* m : std::initializer_list<Module*>{&full, &row}) {
      Tensor b = m->find_parameter("proj.bias")->var.data();
      fill_value(b, 0.25);
    }
  // Input: the full sequence, this rank's hidden slice; output: this rank's sequence slice.
  const Tensor x0 = random_tensor({2, 2 * t_, 8 * t_}, 4), g0 = random_tensor({2, 2 * t_, 12}, 5);
  Variable xf(x0.clone(), true);
  Variable yf = full.forward(xf, ForwardContext{});
  ag::sum(ag::mul(yf, Variable(g0, false))).backward();
  Variable xs(parallel::split_dim(x0, -1, r_, t_).clone(), true);
  Variable ys = row.forward(xs, ForwardContext{});
  ag::sum(ag::mul(ys, Variable(parallel::split_dim(g0, 1, r_, t_), false))).backward();
  EXPECT_LE(rel_err(f64(ys.data()), f64(parallel::split_dim(yf.data(), 1, r_, t_))), kTol);
  EXPECT_LE(rel_err(f64(xs.grad()), f64(parallel::split_dim(xf.grad(), -1, r_, t_))), kTol);
  expect_same_parameter_grads(full, row);
}

TEST_F(TensorParallelLayers, VocabParallelEmbeddingPadsAndMasks) {
  for (bool seq : {false, true}) {
    const std::int64_t V = 100, D = 8, T = 2 * t_;  // 100 rows padded to 128·t: some ranks hold only padding
    Embedding full("wte", V, D, 0.5);
    Embedding vp("wte", V, D, 0.5, TensorParallel{world_, seq}, true);
    full.initialize(9);
    vp.initialize(9);
    EXPECT_EQ(vp.weight().local_shape(), (Shape{padded_vocab_size(V, t_) / t_, D}));
    EXPECT_EQ(padded_vocab_size(V, t_) % (128 * t_), 0);
    expect_same_initial_values(full, vp);
    std::vector<std::int64_t> ids;
    for (std::int64_t i = 0; i < 2 * T; ++i) ids.push_back((i * 37 + 5) % V);
    ids[1] = V - 1;
    ids[2] = ids[3];  // a repeated id accumulates
    const Tensor id = Tensor::from_vector(ids, {2, T});
    const Tensor g0 = random_tensor({2, T, D}, 10);
    Variable yf = full.forward(id, ForwardContext{});
    ag::sum(ag::mul(yf, Variable(g0, false))).backward();
    Variable ys = vp.forward(id, ForwardContext{});
    const Tensor gs = seq ? parallel::split_dim(g0, 1, r_, t_) : g0;
    ag::sum(ag::mul(ys, Variable(gs, false))).backward();
    EXPECT_LE(rel_err(f64(ys.data()), f64(seq ? parallel::split_dim(yf.data(), 1, r_, t_) : yf.data())), kTol);
    expect_same_parameter_grads(full, vp);
  }
}

// An id outside the vocabulary is the same clear error on every layout: under tensor parallelism it must not
// read as the zero vector of a padding row, or of no rank's rows at all.
TEST_F(TensorParallelLayers, VocabParallelEmbeddingRejectsIdsOutsideTheVocabulary) {
  const std::int64_t V = 100, D = 8;
  Embedding full("wte", V, D, 0.5);
  Embedding vp("wte", V, D, 0.5, tp_, true);
  full.initialize(9);
  vp.initialize(9);
  for (std::int64_t bad : {V, padded_vocab_size(V, t_) - 1, padded_vocab_size(V, t_), std::int64_t{-1}}) {
    SCOPED_TRACE(bad);
    const Tensor id = Tensor::from_vector(std::vector<std::int64_t>{3, bad, 7, 1}, {2, 2});
    const std::string expected = testing::error_message([&] { full.forward(id, ForwardContext{}); });
    EXPECT_NE(expected.find(fmt::format("id {} ", bad)), std::string::npos) << expected;
    const std::string msg = testing::error_message([&] { vp.forward(id, ForwardContext{}); });
    EXPECT_NE(msg.find(fmt::format("id {} ", bad)), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("[0, {})", V)), std::string::npos) << msg;
  }
}

TransformerSpec tiny(const std::string& arch, int t) {
  TransformerSpec s = models::preset(arch + "-tiny");
  s.n_layer = 2;
  s.n_head = 2 * t;
  s.n_kv_head = arch == "gpt2" || arch == "bert" ? s.n_head : t;  // GQA: two query heads per key/value head
  s.d_model = 8 * s.n_head;
  s.d_ff = 24 * t;
  s.vocab_size = 100;  // padded to 128·t under TP
  s.max_seq_len = 16;
  s.dropout = 0.25;
  s.init_std = 0.2;
  return s;
}

TEST_F(TensorParallelLayers, AttentionMlpAndBlockMatchTheUnshardedLayers) {
  for (const std::string arch : {"gpt2", "llama", "mistral", "qwen2", "bert"}) {
    for (bool seq : {false, true}) {
      SCOPED_TRACE(fmt::format("{} sequence_parallel={}", arch, seq));
      const TransformerSpec s = tiny(arch, t_);
      const TensorParallel tp{world_, seq};
      const std::int64_t B = 2, T = 2 * t_;
      const ForwardContext ctx = training(B);
      auto run = [&](const auto& m, const Variable& x) {
        const bool split = x.shape()[1] != T;
        return m.forward(x, split ? sequence_context(ctx, tp, x.shape()[1]) : ctx);
      };
      const Tensor x0 = random_tensor({B, T, s.d_model}, 13);
      const Shape out{B, T, s.d_model};
      // The family's block, unsharded and sharded (fresh ones for each part checked).
      const models::Family& family = models::family(s.family);
      auto block = [&](const TensorParallel& p) { return family.make_block("h.0", s, 0, p); };
      auto part = [](std::unique_ptr<Layer>& b, bool attention) -> Layer& {
        if (auto* post_norm = dynamic_cast<PostNormBlock*>(b.get())) {
          return attention ? post_norm->attention() : post_norm->mlp();
        }
        auto& pre_norm = dynamic_cast<PreNormBlock&>(*b);
        return attention ? pre_norm.attention() : pre_norm.mlp();
      };
      {
        SCOPED_TRACE("attention");
        auto full_block = block({}), sharded_block = block(tp);
        Layer &full = part(full_block, true), &sharded = part(sharded_block, true);
        full.initialize(14);
        sharded.initialize(14);
        expect_same_initial_values(full, sharded);
        compare(full, sharded, x0, out, seq, r_, t_, run);
      }
      {
        SCOPED_TRACE("mlp");
        auto full_block = block({}), sharded_block = block(tp);
        Layer &full = part(full_block, false), &sharded = part(sharded_block, false);
        full.initialize(15);
        sharded.initialize(15);
        expect_same_initial_values(full, sharded);
        compare(full, sharded, x0, out, seq, r_, t_, run);
      }
      SCOPED_TRACE("block");
      auto full_block = block({}), sharded_block = block(tp);
      Layer &full = *full_block, &sharded = *sharded_block;
      full.initialize(12);
      sharded.initialize(12);
      expect_same_initial_values(full, sharded);
      compare(full, sharded, x0, out, seq, r_, t_, run);
    }
  }
}

TEST_F(TensorParallelLayers, CausalLMLossAndGradientsMatch) {
  for (const std::string arch : {"gpt2", "llama", "mistral", "qwen2", "bert"}) {
    for (bool seq : {false, true}) {
      SCOPED_TRACE(fmt::format("{} sequence_parallel={}", arch, seq));
      const TransformerSpec s = tiny(arch, t_);
      models::TransformerLM full(s), sharded(s, TensorParallel{world_, seq});
      full.initialize(21);
      sharded.initialize(21);
      expect_same_initial_values(full, sharded);
      const std::int64_t B = 2, T = 2 * t_;
      std::vector<std::int64_t> ids, labels;
      for (std::int64_t i = 0; i < B * T; ++i) {
        ids.push_back((i * 31 + 7) % s.vocab_size);
        labels.push_back(i == 3 ? -100 : (i * 17 + 2) % s.vocab_size);
      }
      labels[0] = s.vocab_size - 1;
      const Tensor id = Tensor::from_vector(ids, {B, T}), lab = Tensor::from_vector(labels, {B, T});
      ForwardContext ctx = training(B);
      if (arch == "bert") {
        // Encoder inputs: token types, and padding keys in the second sample (the last two tokens).
        std::vector<std::int64_t> types, keys;
        for (std::int64_t i = 0; i < B * T; ++i) {
          types.push_back(i % T >= T / 2 ? 1 : 0);
          keys.push_back(i >= B * T - 2 ? 0 : 1);
        }
        ctx.token_types = Tensor::from_vector(types, {B, T});
        ctx.key_mask = Tensor::from_vector(keys, {B, T});
      }
      Variable lf = full.loss(id, lab, ctx, 40.0);
      lf.backward();
      Variable ls = sharded.loss(id, lab, ctx, 40.0);
      ls.backward();
      EXPECT_LE(std::fabs(ls.data().item() - lf.data().item()) / std::fabs(lf.data().item()), kTol);
      expect_same_parameter_grads(full, sharded, kModelTol);
      // Full logits (generation): gathered, padding removed.
      autograd::NoGradGuard no_grad;
      const Tensor a = full.forward(id, ForwardContext{}).data(), b = sharded.forward(id, ForwardContext{}).data();
      ASSERT_EQ(b.shape(), a.shape());
      EXPECT_LE(rel_err(f64(b), f64(a)), kModelTol);
    }
  }
}

TEST_F(TensorParallelLayers, HeadsThatDoNotDivideAreAClearError) {
  if (t_ < 2) GTEST_SKIP();
  TransformerSpec s = tiny("llama", t_);
  s.n_head = 3 * t_ + 1;
  s.n_kv_head = s.n_head;
  s.d_model = 2 * s.n_head;
  const std::string msg = testing::error_message([&] { models::TransformerLM m(s, tp_); });
  EXPECT_NE(msg.find("must divide the number of attention heads n_head="), std::string::npos) << msg;
  s = tiny("llama", t_);
  s.n_kv_head = 1;
  const std::string kv = testing::error_message([&] { models::TransformerLM m(s, tp_); });
  EXPECT_NE(kv.find("n_kv_head=1"), std::string::npos) << kv;
}

}  // namespace
}  // namespace trident::nn
