#include "trident/nn/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <tuple>

#include "testing/helpers.h"
#include "trident/autograd/autograd.h"

namespace trident::nn {
namespace {

namespace ag = trident::autograd;

constexpr std::int64_t kD = 6, kF = 5, kE = 4, kB = 2, kT = 5;

struct Case {
  std::int64_t top_k;
  bool norm;
  bool shared;  // a gated shared expert
  MoEDispatch dispatch;
};

MoEOptions options_for(const Case& c) {
  MoEOptions o;
  o.d_model = kD;
  o.d_ff = kF;
  o.n_experts = kE;
  o.top_k = c.top_k;
  o.norm_topk_prob = c.norm;
  o.dispatch = c.dispatch;
  o.capacity_factor = 0.5;  // low: tokens are dropped
  o.aux_loss_coef = 0.3;
  o.z_loss_coef = 0.05;
  o.shared_d_ff = c.shared ? 7 : 0;
  o.shared_gated = c.shared;
  o.init_std = 0.5;  // large enough that every term of the gradient matters
  o.out_init_std = 0.5;
  return o;
}

std::vector<double> weight(MoE& m, const std::string& name) {
  Parameter* p = m.find_parameter(name);
  EXPECT_NE(p, nullptr) << name;
  return p ? p->var.data().to(DType::f64).to_vector<double>() : std::vector<double>{};
}

// W [out, in] · x
std::vector<double> apply(const std::vector<double>& W, const double* x, std::int64_t out, std::int64_t in) {
  std::vector<double> y(static_cast<std::size_t>(out), 0.0);
  for (std::int64_t o = 0; o < out; ++o)
    for (std::int64_t i = 0; i < in; ++i) y[static_cast<std::size_t>(o)] += W[static_cast<std::size_t>(o * in + i)] * x[i];
  return y;
}

std::vector<double> swiglu_ref(MoE& m, const std::string& prefix, std::int64_t F, const double* x) {
  auto g = apply(weight(m, prefix + ".gate_proj.weight"), x, F, kD);
  auto u = apply(weight(m, prefix + ".up_proj.weight"), x, F, kD);
  std::vector<double> h(static_cast<std::size_t>(F));
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  return apply(weight(m, prefix + ".down_proj.weight"), h.data(), kD, F);
}

struct Reference {
  std::vector<double> y;
  std::vector<std::vector<std::int64_t>> chosen;  // [token][slot]
  std::vector<std::vector<bool>> kept;
  double aux = 0, z = 0, min_gap = 1e9;
  std::int64_t min_kept = 0;  // the fewest assignments an expert keeps
};

// Token by token, straight from the definitions in moe.h.
Reference naive(MoE& m, const std::vector<double>& x, const MoEOptions& o) {
  const std::int64_t N = static_cast<std::int64_t>(x.size()) / kD, K = o.top_k;
  Reference r;
  r.y.assign(x.size(), 0.0);
  const auto Wg = weight(m, "mlp.gate.weight");
  std::vector<std::vector<double>> probs(static_cast<std::size_t>(N));
  std::vector<std::vector<double>> logits(static_cast<std::size_t>(N));
  for (std::int64_t t = 0; t < N; ++t) {
    auto l = apply(Wg, x.data() + t * kD, kE, kD);
    double mx = *std::max_element(l.begin(), l.end()), s = 0;
    for (double v : l) s += std::exp(v - mx);
    std::vector<double> p(l.size());
    for (std::size_t e = 0; e < l.size(); ++e) p[e] = std::exp(l[e] - mx) / s;
    const double lse = mx + std::log(s);
    r.z += lse * lse / static_cast<double>(N);
    std::vector<std::int64_t> idx(static_cast<std::size_t>(kE));
    for (std::int64_t e = 0; e < kE; ++e) idx[static_cast<std::size_t>(e)] = e;
    std::stable_sort(idx.begin(), idx.end(), [&](auto a, auto b) { return p[a] > p[b]; });
    r.min_gap = std::min(r.min_gap, p[idx[K - 1]] - (K < kE ? p[idx[K]] : 0.0));
    r.chosen.emplace_back(idx.begin(), idx.begin() + K);
    logits[static_cast<std::size_t>(t)] = l;
    probs[static_cast<std::size_t>(t)] = p;
  }
  // Capacity: per expert, slot-major then token order.
  r.kept.assign(static_cast<std::size_t>(N), std::vector<bool>(static_cast<std::size_t>(K), true));
  if (o.dispatch == MoEDispatch::capacity) {
    const auto cap = static_cast<std::int64_t>(std::ceil(o.capacity_factor * double(N * K) / double(kE)));
    std::vector<std::int64_t> used(static_cast<std::size_t>(kE), 0);
    for (std::int64_t s = 0; s < K; ++s)
      for (std::int64_t t = 0; t < N; ++t) {
        auto& u = used[static_cast<std::size_t>(r.chosen[t][s])];
        r.kept[t][s] = u < cap;
        ++u;
      }
  }
  std::vector<double> f(static_cast<std::size_t>(kE), 0.0), P(static_cast<std::size_t>(kE), 0.0);
  for (std::int64_t t = 0; t < N; ++t) {
    const auto& p = probs[static_cast<std::size_t>(t)];
    double sel = 0;
    for (std::int64_t s = 0; s < K; ++s) sel += p[r.chosen[t][s]];
    for (std::int64_t s = 0; s < K; ++s) {
      const std::int64_t e = r.chosen[t][s];
      f[e] += 1.0 / double(N * K);
      if (!r.kept[t][s]) continue;
      const double w = o.norm_topk_prob ? p[e] / sel : p[e];
      auto ye = swiglu_ref(m, "mlp.experts." + std::to_string(e), o.d_ff, x.data() + t * kD);
      for (std::int64_t d = 0; d < kD; ++d) r.y[t * kD + d] += w * ye[d];
    }
    for (std::int64_t e = 0; e < kE; ++e) P[e] += p[e] / double(N);
    if (o.shared_d_ff > 0) {
      auto ys = swiglu_ref(m, "mlp.shared_expert", o.shared_d_ff, x.data() + t * kD);
      double g = 1.0;
      if (o.shared_gated) {
        g = apply(weight(m, "mlp.shared_expert_gate.weight"), x.data() + t * kD, 1, kD)[0];
        g = 1 / (1 + std::exp(-g));
      }
      for (std::int64_t d = 0; d < kD; ++d) r.y[t * kD + d] += g * ys[d];
    }
  }
  for (std::int64_t e = 0; e < kE; ++e) r.aux += double(kE) * f[e] * P[e];
  std::vector<std::int64_t> kept(static_cast<std::size_t>(kE), 0);
  for (std::int64_t t = 0; t < N; ++t)
    for (std::int64_t s = 0; s < K; ++s) kept[static_cast<std::size_t>(r.chosen[t][s])] += r.kept[t][s] ? 1 : 0;
  r.min_kept = *std::min_element(kept.begin(), kept.end());
  return r;
}

// A layer and an input whose routing is far from a tie (so finite differences keep the top-k)
// and that runs every expert (so every parameter has a gradient).
struct Fixture {
  std::unique_ptr<MoE> m;
  Tensor x;
  Reference ref;
};

Fixture make(const Case& c, std::int64_t B = kB) {
  const MoEOptions o = options_for(c);
  for (std::uint64_t seed = 1;; ++seed) {
    Fixture s;
    s.m = std::make_unique<MoE>("mlp", o);
    s.m->initialize(seed, DType::f64);
    s.x = testing::random_tensor({B, kT, kD}, 100 + seed, -1, 1, DType::f64);
    s.ref = naive(*s.m, s.x.to_vector<double>(), o);
    if (s.ref.min_gap > 0.02 && s.ref.min_kept > 0) return s;
    if (seed > 200) ADD_FAILURE() << "no seed without a near tie";
  }
}

class MoEGradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(MoEGradCheck, MatchesNaiveReference) {
  const Case c = GetParam();
  Fixture s = make(c);
  AuxLosses aux;
  ForwardContext ctx;
  ctx.compute_dtype = DType::f64;
  ctx.aux = &aux;
  Variable y = s.m->forward(Variable(s.x), ctx);
  EXPECT_EQ(y.shape(), (Shape{kB, kT, kD}));
  const auto got = y.data().to_vector<double>();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], s.ref.y[i], 1e-12) << i;
  ASSERT_EQ(aux.losses.size(), 2u);
  EXPECT_NEAR(aux.losses[0].data().item(), 0.3 * s.ref.aux, 1e-12);
  EXPECT_NEAR(aux.losses[1].data().item(), 0.05 * s.ref.z, 1e-12);
  ASSERT_EQ(aux.stats.size(), 1u);
  std::int64_t dropped = 0;
  for (const auto& row : s.ref.kept) dropped += std::count(row.begin(), row.end(), false);
  EXPECT_EQ(aux.stats[0].dropped, dropped);
  if (c.dispatch == MoEDispatch::capacity) {
    EXPECT_GT(dropped, 0);
  }
  EXPECT_EQ(aux.stats[0].assignments, kB * kT * c.top_k);
  EXPECT_EQ(aux.stats[0].layer, "mlp");
  std::vector<std::int64_t> routed(kE, 0);
  for (const auto& row : s.ref.chosen)
    for (std::int64_t e : row) ++routed[static_cast<std::size_t>(e)];
  EXPECT_EQ(aux.stats[0].tokens_per_expert, routed);
  EXPECT_EQ(aux.stats[0].max_load, static_cast<double>(*std::max_element(routed.begin(), routed.end())));
  EXPECT_EQ(aux.stats[0].mean_load, static_cast<double>(kB * kT * c.top_k) / kE);
  EXPECT_NEAR(aux.stats[0].dropped_fraction(), static_cast<double>(dropped) / static_cast<double>(kB * kT * c.top_k), 0);

  // Without a sink the output is the same and nothing else is computed.
  ForwardContext plain;
  plain.compute_dtype = DType::f64;
  EXPECT_EQ(s.m->forward(Variable(s.x), plain).data().to_vector<double>(), got);
}

// The derivative of f along a random direction u in the space of `tensors` (f64, changed in place
// and restored): analytically Σ grads·u, and by central differences with step 1e-5.
std::pair<double, double> directional_derivative(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grads,
                                                 const std::function<Variable()>& f, std::mt19937_64& gen) {
  std::normal_distribution<double> nd;
  std::vector<std::vector<double>> dir;
  double analytic = 0;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    std::vector<double> u(static_cast<std::size_t>(tensors[k].numel()));
    for (auto& v : u) v = nd(gen);
    auto g = grads[k].span<double>();
    for (std::size_t i = 0; i < u.size(); ++i) analytic += g[i] * u[i];
    dir.push_back(std::move(u));
  }
  auto shifted = [&](double h) {
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      auto v = tensors[k].span<double>();
      for (std::size_t i = 0; i < v.size(); ++i) v[i] += h * dir[k][i];
    }
    ag::NoGradGuard ng;
    const double l = f().data().item();
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      auto v = tensors[k].span<double>();
      for (std::size_t i = 0; i < v.size(); ++i) v[i] -= h * dir[k][i];
    }
    return l;
  };
  const double h = 1e-5;
  return {analytic, (shifted(h) - shifted(-h)) / (2 * h)};
}

// The layer's forward of `x` in f64, its auxiliary losses added to `aux`.
Variable forward_f64(const Fixture& s, const Variable& x, AuxLosses& aux) {
  ForwardContext ctx;
  ctx.compute_dtype = DType::f64;
  ctx.aux = &aux;
  return s.m->forward(x, ctx);
}

// f64 central differences of sum(y · R) + aux + z along random directions in (input, parameters).
TEST_P(MoEGradCheck, MatchesFiniteDifferences) {
  const Case c = GetParam();
  Fixture s = make(c);
  const Tensor R = testing::random_tensor({kB, kT, kD}, 7, -1, 1, DType::f64);
  Variable xv(s.x, true);
  auto loss = [&](const Variable& x) {
    AuxLosses aux;
    Variable y = forward_f64(s, x, aux);
    return ag::add(ag::sum(ag::mul(y, Variable(R))), aux.total());
  };
  loss(xv).backward();

  std::vector<Tensor> tensors{s.x};
  std::vector<Tensor> grads{xv.grad()};
  for (Parameter* p : s.m->parameters()) {
    ASSERT_TRUE(p->var.grad().defined()) << p->name << " received no gradient";
    tensors.push_back(p->var.data());
    grads.push_back(p->var.grad());
  }
  std::mt19937_64 gen(5);
  for (int trial = 0; trial < 3; ++trial) {
    const auto [analytic, numeric] = directional_derivative(tensors, grads, [&] { return loss(Variable(s.x)); }, gen);
    EXPECT_NEAR(analytic, numeric, 1e-7 * std::max(1.0, std::fabs(numeric))) << "trial " << trial;
  }
}

// The auxiliary losses alone (they are small beside the output term above): f64 central
// differences w.r.t. the input and the router, the only things they depend on.
TEST_P(MoEGradCheck, AuxLossesMatchFiniteDifferences) {
  Fixture s = make(GetParam());
  Tensor router = s.m->router().weight().var.data();
  auto aux_loss = [&](const Variable& x) {
    AuxLosses aux;
    forward_f64(s, x, aux);
    return aux.total();
  };
  Variable xv(s.x, true);
  aux_loss(xv).backward();
  const std::vector<Tensor> tensors{s.x, router};
  const std::vector<Tensor> grads{xv.grad(), s.m->router().weight().var.grad()};
  std::mt19937_64 gen(9);
  const auto [analytic, numeric] = directional_derivative(tensors, grads, [&] { return aux_loss(Variable(s.x)); }, gen);
  EXPECT_GT(std::fabs(numeric), 1e-3);
  EXPECT_NEAR(analytic, numeric, 1e-8 * std::max(1.0, std::fabs(numeric)));
}

INSTANTIATE_TEST_SUITE_P(
    Routing, MoEGradCheck,
    ::testing::Values(Case{1, true, false, MoEDispatch::dropless}, Case{1, false, false, MoEDispatch::dropless},
                      Case{2, true, false, MoEDispatch::dropless}, Case{2, false, false, MoEDispatch::dropless},
                      Case{2, true, true, MoEDispatch::dropless}, Case{1, false, true, MoEDispatch::dropless},
                      Case{1, true, false, MoEDispatch::capacity}, Case{2, true, false, MoEDispatch::capacity},
                      Case{2, false, true, MoEDispatch::capacity}, Case{1, false, true, MoEDispatch::capacity}),
    [](const auto& p) {
      const Case& c = p.param;
      return "top" + std::to_string(c.top_k) + (c.norm ? "_norm" : "_raw") + (c.shared ? "_shared" : "") +
             (c.dispatch == MoEDispatch::capacity ? "_capacity" : "_dropless");
    });

// Expert capacity keeps first choices before second choices, earlier tokens first.
TEST(MoERouting, CapacityDropsInSlotThenTokenOrder) {
  // 4 tokens, 2 experts, top-2: every token picks both experts; expert 0 is the first choice of tokens 0, 2, 3.
  const std::vector<double> probs{0.9, 0.1, 0.2, 0.8, 0.7, 0.3, 0.6, 0.4};
  const std::int64_t cap = moe_capacity(0.75, 4, 2, 2);
  EXPECT_EQ(cap, 3);
  MoERouting r = route_top_k(probs, 4, 2, 2, cap);
  EXPECT_EQ(r.expert, (std::vector<std::int64_t>{0, 1, 1, 0, 0, 1, 0, 1}));
  // Expert 0: slot 0 of tokens 0, 2, 3 fill it; slot 1 of token 1 (assignment 3) is dropped.
  // Expert 1: slot 0 of token 1 (3 → a=2), then slot 1 of tokens 0, 2 (a=1, 5); token 3's (a=7) dropped.
  EXPECT_EQ(r.order, (std::vector<std::int64_t>{0, 4, 6, 2, 1, 5}));
  EXPECT_EQ(r.counts, (std::vector<std::int64_t>{3, 3}));
  EXPECT_EQ(r.routed, (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(r.dropped, 2);
  EXPECT_EQ(r.position[3], -1);
  EXPECT_EQ(r.position[7], -1);
  // Ties go to the lower expert index.
  MoERouting tie = route_top_k({0.5, 0.5}, 1, 2, 1, 0);
  EXPECT_EQ(tie.expert, (std::vector<std::int64_t>{0}));
  EXPECT_EQ(tie.dropped, 0);
}

// Dropless routing is per token: two micro-batches give each token what the whole batch gives it.
TEST(MoE, MicroBatchesMatchTheWholeBatch) {
  Fixture s = make(Case{2, true, true, MoEDispatch::dropless}, 4);
  ForwardContext ctx;
  ctx.compute_dtype = DType::f64;
  const auto whole = s.m->forward(Variable(s.x), ctx).data().to_vector<double>();
  const std::vector<double> xs = s.x.to_vector<double>();
  std::vector<double> parts;
  for (std::int64_t h = 0; h < 2; ++h) {
    Tensor half = Tensor::from_vector(
        std::vector<double>(xs.begin() + h * 2 * kT * kD, xs.begin() + (h + 1) * 2 * kT * kD), Shape{2, kT, kD});
    auto y = s.m->forward(Variable(half), ctx).data().to_vector<double>();
    parts.insert(parts.end(), y.begin(), y.end());
  }
  ASSERT_EQ(parts.size(), whole.size());
  for (std::size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(parts[i], whole[i], 1e-12) << i;
}

// f32 master weights with f32 and bf16 compute: the router runs in f32, the experts in the compute dtype.
TEST(MoE, LowPrecisionComputeMatchesTheReference) {
  const Case c{2, true, true, MoEDispatch::capacity};
  Fixture s = make(c);
  for (Parameter* p : s.m->parameters()) p->var = Variable(p->var.data().to(DType::f32), true);
  const Tensor x32 = s.x.to(DType::f32);
  for (DType dt : {DType::f32, DType::bf16}) {
    AuxLosses aux;
    ForwardContext ctx;
    ctx.compute_dtype = dt;
    ctx.aux = &aux;
    Variable y = s.m->forward(Variable(x32, true), ctx);
    EXPECT_EQ(y.data().dtype(), dt);
    const Reference ref = naive(*s.m, x32.to(DType::f64).to_vector<double>(), options_for(c));
    EXPECT_LT(testing::rel_err(testing::f64(y.data()), ref.y), dt == DType::f32 ? 1e-5 : 5e-2) << dtype_name(dt);
    ag::add(ag::cast(ag::sum(y), DType::f32), aux.total()).backward();
    for (Parameter* p : s.m->parameters()) {
      ASSERT_TRUE(p->var.grad().defined()) << p->name;
      for (double g : testing::f64(p->var.grad())) ASSERT_TRUE(std::isfinite(g)) << p->name;
    }
    s.m->zero_grad();
  }
}

TEST(MoE, FamilyNamesAndShapes) {
  MoEOptions o;
  o.d_model = 8;
  o.d_ff = 12;
  o.n_experts = 3;
  o.top_k = 2;
  o.gate = "gate";
  o.experts = "experts";
  o.expert_gate = "w1";
  o.expert_down = "w2";
  o.expert_up = "w3";
  MoE mixtral("model.layers.0.block_sparse_moe", o);
  ASSERT_NE(mixtral.find_parameter("model.layers.0.block_sparse_moe.gate.weight"), nullptr);
  EXPECT_EQ(mixtral.find_parameter("model.layers.0.block_sparse_moe.gate.weight")->global_shape, (Shape{3, 8}));
  ASSERT_NE(mixtral.find_parameter("model.layers.0.block_sparse_moe.experts.2.w1.weight"), nullptr);
  EXPECT_EQ(mixtral.find_parameter("model.layers.0.block_sparse_moe.experts.2.w2.weight")->global_shape,
            (Shape{8, 12}));
  EXPECT_EQ(mixtral.find_parameter("model.layers.0.block_sparse_moe.experts.2.w3.weight")->global_shape,
            (Shape{12, 8}));
  EXPECT_EQ(mixtral.parameters().size(), 1u + 3u * 3u);

  MoEOptions q = o;
  q.expert_gate = "gate_proj";
  q.expert_up = "up_proj";
  q.expert_down = "down_proj";
  q.shared_d_ff = 20;
  q.shared_gated = true;
  MoE qwen("model.layers.1.mlp", q);
  EXPECT_EQ(qwen.find_parameter("model.layers.1.mlp.shared_expert.up_proj.weight")->global_shape, (Shape{20, 8}));
  EXPECT_EQ(qwen.find_parameter("model.layers.1.mlp.shared_expert_gate.weight")->global_shape, (Shape{1, 8}));
  EXPECT_NE(qwen.find_parameter("model.layers.1.mlp.experts.0.down_proj.weight"), nullptr);
}

TEST(MoE, BadOptions) {
  MoEOptions o;
  o.d_model = 8;
  o.d_ff = 4;
  o.n_experts = 2;
  o.top_k = 3;
  EXPECT_NE(testing::error_message([&] { MoE("m", o); }).find("top_k=3"), std::string::npos);
}

}  // namespace
}  // namespace trident::nn
