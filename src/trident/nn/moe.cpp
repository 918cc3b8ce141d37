#include "trident/nn/moe.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <cmath>
#include <numeric>

#include "trident/autograd/autograd.h"
#include "trident/autograd/function.h"
#include "trident/core/error.h"

namespace trident::nn {

namespace ag = trident::autograd;

Variable AuxLosses::total() const {
  Variable sum;
  for (const Variable& l : losses) sum = sum.defined() ? ag::add(sum, l) : l;
  return sum;
}

std::int64_t moe_capacity(double capacity_factor, std::int64_t tokens, std::int64_t top_k, std::int64_t n_experts) {
  const double c = std::ceil(capacity_factor * static_cast<double>(tokens * top_k) / static_cast<double>(n_experts));
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(c));
}

MoERouting route_top_k(const std::vector<double>& probs, std::int64_t tokens, std::int64_t n_experts,
                       std::int64_t top_k, std::int64_t capacity) {
  TRIDENT_CHECK(static_cast<std::int64_t>(probs.size()) == tokens * n_experts,
                "moe: {} router probabilities for {} tokens and {} experts", probs.size(), tokens, n_experts);
  TRIDENT_CHECK(top_k >= 1 && top_k <= n_experts, "moe: top_k={} must be in [1, n_experts={}]", top_k, n_experts);
  MoERouting r;
  r.tokens = tokens;
  r.n_experts = n_experts;
  r.top_k = top_k;
  r.capacity = capacity;
  const std::int64_t A = tokens * top_k;
  r.expert.resize(static_cast<std::size_t>(A));
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n_experts));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* p = probs.data() + t * n_experts;
    std::iota(idx.begin(), idx.end(), 0);
    // Descending probability, ties to the lower expert index.
    std::partial_sort(idx.begin(), idx.begin() + top_k, idx.end(),
                      [p](std::int64_t a, std::int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (std::int64_t s = 0; s < top_k; ++s) r.expert[static_cast<std::size_t>(t * top_k + s)] = idx[static_cast<std::size_t>(s)];
  }
  // Per expert, its assignments in (slot, token) order; keep the first `capacity`.
  std::vector<std::vector<std::int64_t>> per(static_cast<std::size_t>(n_experts));
  for (std::int64_t s = 0; s < top_k; ++s)
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t a = t * top_k + s;
      per[static_cast<std::size_t>(r.expert[static_cast<std::size_t>(a)])].push_back(a);
    }
  r.counts.assign(static_cast<std::size_t>(n_experts), 0);
  r.routed.assign(static_cast<std::size_t>(n_experts), 0);
  r.position.assign(static_cast<std::size_t>(A), -1);
  for (std::int64_t e = 0; e < n_experts; ++e) {
    const auto& list = per[static_cast<std::size_t>(e)];
    const auto n = static_cast<std::int64_t>(list.size());
    const std::int64_t keep = capacity > 0 ? std::min(n, capacity) : n;
    r.routed[static_cast<std::size_t>(e)] = n;
    r.counts[static_cast<std::size_t>(e)] = keep;
    r.dropped += n - keep;
    for (std::int64_t i = 0; i < keep; ++i) {
      r.position[static_cast<std::size_t>(list[static_cast<std::size_t>(i)])] = static_cast<std::int64_t>(r.order.size());
      r.order.push_back(list[static_cast<std::size_t>(i)]);
    }
  }
  return r;
}

MoE::MoE(std::string prefix, MoEOptions options, ExpertParallel ep, dist::Group cp)
    : Layer(std::move(prefix)), options_(std::move(options)), ep_(std::move(ep)), cp_(std::move(cp)) {
  const MoEOptions& o = options_;
  TRIDENT_CHECK(!cp_.active() || o.dispatch == MoEDispatch::dropless,
                "model.moe_capacity_factor={} with dist.context_parallel_size={}: capacity drops depend on the whole "
                "micro-batch's token order; use dropless routing (model.moe_capacity_factor=0)",
                o.capacity_factor, cp_.size());
  TRIDENT_CHECK(o.d_model > 0 && o.d_ff > 0, "moe: d_model={} and d_ff={} must be positive", o.d_model, o.d_ff);
  TRIDENT_CHECK(o.n_experts >= 1, "moe: n_experts={} must be positive", o.n_experts);
  TRIDENT_CHECK(o.top_k >= 1 && o.top_k <= o.n_experts, "moe: top_k={} must be in [1, n_experts={}]", o.top_k,
                o.n_experts);
  TRIDENT_CHECK(o.dispatch == MoEDispatch::dropless || o.capacity_factor > 0,
                "moe: capacity_factor={} must be positive", o.capacity_factor);
  TRIDENT_CHECK(o.shared_d_ff >= 0, "moe: shared_d_ff={} must be >= 0", o.shared_d_ff);
  gate_ = &add_module(std::make_unique<Linear>(child_prefix(o.gate),
                                               LinearOptions{o.d_model, o.n_experts, false, WeightLayout::out_in, o.init_std}));
  auto swiglu = [&](std::int64_t d_ff) {
    FeedForwardOptions f;
    f.d_model = o.d_model;
    f.d_ff = d_ff;
    f.activation = Activation::swiglu;
    f.init_std = o.init_std;
    f.out_init_std = o.out_init_std;
    f.gate = o.expert_gate;
    f.up = o.expert_up;
    f.down = o.expert_down;
    return f;
  };
  TRIDENT_CHECK(o.n_experts % ep_.size() == 0,
                "dist.expert_parallel_size={} must divide the {} experts of each MoE layer (model.n_experts)",
                ep_.size(), o.n_experts);
  const std::int64_t local = o.n_experts / ep_.size();
  for (std::int64_t e = local * ep_.rank(); e < local * (ep_.rank() + 1); ++e) {
    experts_.push_back(&add_module(
        std::make_unique<FeedForward>(child_prefix(o.experts + "." + std::to_string(e)), swiglu(o.d_ff))));
    if (ep_.active())
      for (Parameter* p : experts_.back()->parameters()) p->expert_parallel = true;
  }
  if (o.shared_d_ff > 0) {
    shared_ = &add_module(std::make_unique<FeedForward>(child_prefix(o.shared_expert), swiglu(o.shared_d_ff)));
    if (o.shared_gated) {
      shared_gate_ = &add_module(std::make_unique<Linear>(
          child_prefix(o.shared_expert_gate), LinearOptions{o.d_model, 1, false, WeightLayout::out_in, o.init_std}));
    }
  }
}

namespace {

Tensor ids_tensor(const std::vector<std::int64_t>& ids, Device device) {
  return Tensor::from_vector(ids, Shape{static_cast<std::int64_t>(ids.size())}).to(device);
}

Variable constant(const std::vector<double>& values, Shape shape, DType dtype, Device device) {
  return Variable(Tensor::from_vector(values, std::move(shape)).to(dtype).to(device));
}

// x [M, 1] → [M, cols]: each row's scalar repeated (a matmul with a row of ones; there is no broadcasting mul).
Variable broadcast_column(const Variable& x, std::int64_t cols) {
  const Tensor ones = Tensor::full({1, cols}, 1.0, x.data().dtype(), x.data().device());
  return ag::matmul(x, Variable(ones));
}

}  // namespace

FeedForward& MoE::expert(std::int64_t e) {
  const std::int64_t le = e - first_expert();
  TRIDENT_CHECK(le >= 0 && le < local_experts(), "moe: expert {} is not on this rank (it holds experts [{}, {}))", e,
                first_expert(), first_expert() + local_experts());
  return *experts_[static_cast<std::size_t>(le)];
}

namespace {

// The rows of x [M, D] regrouped: send_rows[j] consecutive rows to rank j of the group; the result holds
// recv_rows[i] rows from each rank i, in rank order. Backward sends the gradients back the same way.
Tensor exchange(const Tensor& x, const std::vector<std::int64_t>& send_rows, const std::vector<std::int64_t>& recv_rows,
                dist::Communicator& group, const std::string& what) {
  const std::int64_t D = x.rank() > 1 ? x.size(1) : 1;
  std::vector<std::int64_t> send(send_rows), recv(recv_rows);
  std::int64_t total = 0;
  for (auto& n : send) n *= D;
  for (auto& n : recv) {
    total += n;
    n *= D;
  }
  Tensor out = Tensor::empty({total, D}, x.dtype(), x.device());
  dist::CollectiveOptions o;
  o.blocking = true;
  o.context = what;
  group.all_to_all(x, send, out, recv, o)->wait();
  return out;
}

Variable exchange_rows(const Variable& x, const std::vector<std::int64_t>& send_rows,
                       const std::vector<std::int64_t>& recv_rows, const std::shared_ptr<dist::Communicator>& group,
                       const std::string& what) {
  return ag::make_result(exchange(x.data(), send_rows, recv_rows, *group, what), {x}, "expert_all_to_all",
                         [=](const ag::GradContext& c) {
                           return std::vector<Tensor>{exchange(c.grad(), recv_rows, send_rows, *group, what + ", backward")};
                         });
}

}  // namespace

Variable MoE::run_local(const Variable& rows, const std::vector<std::int64_t>& counts, const ForwardContext& ctx) const {
  std::vector<Variable> outs;
  std::int64_t offset = 0;
  for (std::size_t le = 0; le < counts.size(); ++le) {
    const std::int64_t n = counts[le];
    if (n == 0) continue;
    outs.push_back(experts_[le]->forward(ag::slice(rows, 0, offset, offset + n), ctx));
    offset += n;
  }
  if (outs.empty()) return rows;  // no rows: the (empty) input stands for the output
  return outs.size() == 1 ? outs[0] : ag::concat(outs, 0);
}

Variable MoE::run_experts(const Variable& xs, const std::vector<std::int64_t>& counts, const ForwardContext& ctx) const {
  if (!ep_.active()) return run_local(xs, counts, ctx);
  const int e = ep_.size();
  const std::int64_t L = local_experts();
  const Device device = xs.data().device();
  // Every sender's row count for each of every holder's experts: counts (global expert order) is already
  // rank-major, L per rank; received[i·L + le] = rows from rank i for local expert le.
  Tensor sent = Tensor::from_vector(counts, Shape{static_cast<std::int64_t>(counts.size())}).to(device);
  Tensor got = Tensor::empty({e * L}, DType::i64, device);
  dist::CollectiveOptions o;
  o.blocking = true;
  o.context = "moe token counts in " + prefix();
  ep_.group->all_to_all(sent, std::vector<std::int64_t>(static_cast<std::size_t>(e), L), got,
                        std::vector<std::int64_t>(static_cast<std::size_t>(e), L), o)->wait();
  const std::vector<std::int64_t> received = got.to(Device::cpu()).to_vector<std::int64_t>();
  std::vector<std::int64_t> send_rows(static_cast<std::size_t>(e), 0), recv_rows(static_cast<std::size_t>(e), 0);
  for (int j = 0; j < e; ++j)
    for (std::int64_t le = 0; le < L; ++le) {
      send_rows[static_cast<std::size_t>(j)] += counts[static_cast<std::size_t>(j * L + le)];
      recv_rows[static_cast<std::size_t>(j)] += received[static_cast<std::size_t>(j * L + le)];
    }
  // Fault injection for tests/dist/failure_test.sh: a process started with TRIDENT_TEST_STALL_MOE_DISPATCH=1
  // never joins a dispatch, so its peers' dispatch must time out and name this layer.
  if (const char* stall = std::getenv("TRIDENT_TEST_STALL_MOE_DISPATCH"); stall && std::string(stall) == "1")
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  const Variable in = exchange_rows(xs, send_rows, recv_rows, ep_.group, "moe dispatch in " + prefix());
  // Sender-major → expert-major: local expert le's rows from rank 0, then rank 1, ...
  std::vector<std::int64_t> start(static_cast<std::size_t>(e * L));  // first row of block (i, le)
  std::int64_t at = 0;
  for (std::size_t b = 0; b < start.size(); ++b) {
    start[b] = at;
    at += received[b];
  }
  std::vector<std::int64_t> by_expert, per_expert(static_cast<std::size_t>(L), 0);
  by_expert.reserve(static_cast<std::size_t>(at));
  for (std::int64_t le = 0; le < L; ++le)
    for (int i = 0; i < e; ++i) {
      const auto b = static_cast<std::size_t>(i * L + le);
      for (std::int64_t k = 0; k < received[b]; ++k) by_expert.push_back(start[b] + k);
      per_expert[static_cast<std::size_t>(le)] += received[b];
    }
  Variable out = in;
  if (at > 0) {
    std::vector<std::int64_t> inverse(by_expert.size());
    for (std::size_t k = 0; k < by_expert.size(); ++k) inverse[static_cast<std::size_t>(by_expert[k])] = static_cast<std::int64_t>(k);
    const Variable grouped = run_local(ag::embedding(in, ids_tensor(by_expert, device)), per_expert, ctx);
    out = ag::embedding(grouped, ids_tensor(inverse, device));
  }
  return exchange_rows(out, recv_rows, send_rows, ep_.group, "moe combine in " + prefix());
}

Variable MoE::forward(const Variable& x_in, const ForwardContext& ctx) const {
  const MoEOptions& o = options_;
  const Shape in_shape = x_in.shape();
  TRIDENT_CHECK(in_shape.rank() >= 2 && in_shape[in_shape.rank() - 1] == o.d_model,
                "moe: input {} must end in d_model={}", in_shape, o.d_model);
  const std::int64_t D = o.d_model, E = o.n_experts, K = o.top_k;
  const std::int64_t N = in_shape.numel() / D;
  Variable x = ag::reshape(x_in, {N, D});
  if (x.data().dtype() != ctx.compute_dtype) x = ag::cast(x, ctx.compute_dtype);
  const Device device = x.data().device();

  // Router: logits and probabilities in f64 for f64 compute, else f32.
  Variable logits = gate_->forward(x, ctx);
  const DType rdt = logits.data().dtype() == DType::f64 ? DType::f64 : DType::f32;
  if (logits.data().dtype() != rdt) logits = ag::cast(logits, rdt);
  const Variable probs = ag::softmax(logits);
  const std::vector<double> p_host = probs.data().to(Device::cpu()).to(DType::f64).to_vector<double>();
  const std::int64_t capacity =
      o.dispatch == MoEDispatch::capacity ? moe_capacity(o.capacity_factor, N, K, E) : 0;
  const MoERouting r = route_top_k(p_host, N, E, K, capacity);

  // The top-k weights [N·K, 1], row t·K + s.
  std::vector<std::int64_t> flat(static_cast<std::size_t>(N * K));
  for (std::int64_t a = 0; a < N * K; ++a) flat[static_cast<std::size_t>(a)] = (a / K) * E + r.expert[static_cast<std::size_t>(a)];
  const Tensor flat_ids = ids_tensor(flat, device);
  Variable weights;
  if (o.norm_topk_prob) {
    // softmax over the selected logits = the selected probabilities renormalised to sum to 1.
    Variable sel = ag::embedding(ag::reshape(logits, {N * E, 1}), flat_ids);
    weights = ag::reshape(ag::softmax(ag::reshape(sel, {N, K})), {N * K, 1});
  } else {
    weights = ag::embedding(ag::reshape(probs, {N * E, 1}), flat_ids);
  }

  // Dispatch: gather the kept assignments' rows sorted by expert, one SwiGLU per expert block.
  const auto M = static_cast<std::int64_t>(r.order.size());
  std::vector<std::int64_t> rows(static_cast<std::size_t>(M));
  for (std::int64_t i = 0; i < M; ++i) rows[static_cast<std::size_t>(i)] = r.order[static_cast<std::size_t>(i)] / K;
  Variable y, ys;
  if (M > 0 || ep_.active()) {  // an expert-parallel rank joins the exchanges even with nothing to send
    const Variable xs = M > 0 ? ag::embedding(x, ids_tensor(rows, device)) : ag::slice(x, 0, 0, 0);
    ys = run_experts(xs, r.counts, ctx);  // [M, D]
  }
  if (M > 0) {
    Variable w = ag::embedding(weights, ids_tensor(r.order, device));  // [M, 1]
    if (w.data().dtype() != ys.data().dtype()) w = ag::cast(w, ys.data().dtype());
    ys = ag::mul(ys, broadcast_column(w, D));
    // Combine: row t·K + s of the gather is its output row, or the appended zero row when dropped.
    const bool any_dropped = r.dropped > 0;
    if (any_dropped) ys = ag::concat({ys, Variable(Tensor::zeros({1, D}, ys.data().dtype(), device))}, 0);
    std::vector<std::int64_t> back(static_cast<std::size_t>(N * K));
    for (std::int64_t a = 0; a < N * K; ++a) {
      const std::int64_t pos = r.position[static_cast<std::size_t>(a)];
      back[static_cast<std::size_t>(a)] = pos >= 0 ? pos : M;
    }
    Variable g = ag::reshape(ag::embedding(ys, ids_tensor(back, device)), {N, K * D});
    y = ag::slice(g, 1, 0, D);
    for (std::int64_t s = 1; s < K; ++s) y = ag::add(y, ag::slice(g, 1, s * D, (s + 1) * D));
  }
  if (shared_) {
    Variable sh = shared_->forward(x, ctx);
    if (shared_gate_) {
      // sigmoid(z) = (1 + tanh(z / 2)) / 2
      Variable z = shared_gate_->forward(x, ctx);  // [N, 1]
      const Variable ones(Tensor::full({N, 1}, 1.0, z.data().dtype(), device));
      Variable sig = ag::scale(ag::add(ag::tanh(ag::scale(z, 0.5)), ones), 0.5);
      sh = ag::mul(sh, broadcast_column(sig, D));
    }
    y = y.defined() ? ag::add(y, sh) : sh;
  }
  if (!y.defined()) y = Variable(Tensor::zeros({N, D}, ctx.compute_dtype, device));

  if (ctx.aux) {
    AuxLosses::LayerStats st;
    st.layer = prefix();
    st.layer_index = o.layer;
    st.tokens_per_expert = r.routed;
    st.assignments = N * K;
    st.dropped = r.dropped;
    st.max_load = static_cast<double>(*std::max_element(r.routed.begin(), r.routed.end()));
    st.mean_load = static_cast<double>(N * K) / static_cast<double>(E);
    ctx.aux->stats.push_back(std::move(st));
    // Under context parallelism the means run over the whole sequences' tokens (N_g on all cp ranks), and
    // each rank adds its tokens' terms: the shares sum to the whole sequence's loss.
    const std::int64_t N_g = N * cp_.size();
    if (o.aux_loss_coef != 0) {
      // coef · E · Σ_e f_e P_e = coef · E / N · Σ_t Σ_e probs[t, e] f_e
      Tensor routed = Tensor::from_vector<std::int64_t>(r.routed, {E});
      if (cp_.active()) {
        dist::CollectiveOptions counts;
        counts.context = "moe routed counts in " + prefix();
        cp_.group->all_reduce_sync(routed, counts);
      }
      const auto* n_e = routed.data<std::int64_t>();
      std::vector<double> f(static_cast<std::size_t>(E));
      for (std::int64_t e = 0; e < E; ++e)
        f[static_cast<std::size_t>(e)] = static_cast<double>(n_e[e]) / static_cast<double>(N_g * K);
      Variable pf = ag::matmul(probs, constant(f, {E, 1}, rdt, device));
      ctx.aux->losses.push_back(ag::scale(ag::sum(pf), o.aux_loss_coef * static_cast<double>(E) / static_cast<double>(N_g)));
    }
    if (o.z_loss_coef != 0) {
      // logsumexp_t, with its exact value and gradient probs_t, as
      // Σ_e logits[t, e] · probs[t, e] (probs held constant) + c_t, c_t computed here.
      // There is no logsumexp op; this form is exact to first order (z-loss needs no second).
      const std::vector<double> l_host = logits.data().to(Device::cpu()).to(DType::f64).to_vector<double>();
      std::vector<double> c(static_cast<std::size_t>(N));
      for (std::int64_t t = 0; t < N; ++t) {
        const double* l = l_host.data() + t * E;
        const double* p = p_host.data() + t * E;
        const double mx = *std::max_element(l, l + E);
        double s = 0, lp = 0;
        for (std::int64_t e = 0; e < E; ++e) {
          s += std::exp(l[e] - mx);
          lp += l[e] * p[e];
        }
        c[static_cast<std::size_t>(t)] = mx + std::log(s) - lp;
      }
      const Variable p_const(probs.data());
      Variable lse = ag::add(ag::matmul(ag::mul(logits, p_const), constant(std::vector<double>(static_cast<std::size_t>(E), 1.0), {E, 1}, rdt, device)),
                             constant(c, {N, 1}, rdt, device));
      ctx.aux->losses.push_back(ag::scale(ag::sum(ag::mul(lse, lse)), o.z_loss_coef / static_cast<double>(N_g)));
    }
  }
  return ag::reshape(y, in_shape);
}

}  // namespace trident::nn
