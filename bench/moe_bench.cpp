// One training step (forward + backward) of a mixture-of-experts layer against
// the dense SwiGLU MLP with the same active parameters per token, measured in
// the same run: 8 experts, top-2, d_model 256, expert d_ff 512 (dropless, with
// the load-balancing loss) vs a dense d_ff of 1024 = top_k · expert d_ff.
// The ratio is the cost of routing, gathering, per-expert GEMMs on smaller
// blocks and the weighted scatter back, over the dense GEMMs.
//
//   moe_bench [--tokens N] [--reps R] [--threads T] [--dtype f32|bf16]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "trident/autograd/autograd.h"
#include "trident/core/parallel.h"
#include "trident/core/rng.h"
#include "trident/nn/moe.h"

namespace {

using namespace trident;
namespace ag = trident::autograd;
using trident::autograd::Variable;

double median_seconds(int reps, const std::function<void()>& f) {
  using clock = std::chrono::steady_clock;
  f();  // warm-up
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = clock::now();
    f();
    times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t tokens = 2048;
  int reps = 9;
  DType dtype = DType::f32;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--tokens") tokens = std::atoll(v.c_str());
    else if (a == "--reps") reps = std::atoi(v.c_str());
    else if (a == "--threads") set_num_threads(std::atoi(v.c_str()));
    else if (a == "--dtype") dtype = v == "bf16" ? DType::bf16 : DType::f32;
  }
  const std::int64_t D = 256, F = 512, E = 8, K = 2;

  nn::MoEOptions mo;
  mo.d_model = D;
  mo.d_ff = F;
  mo.n_experts = E;
  mo.top_k = K;
  mo.aux_loss_coef = 0.01;
  nn::MoE moe("moe", mo);
  moe.initialize(1);
  nn::FeedForwardOptions fo;
  fo.d_model = D;
  fo.d_ff = K * F;
  fo.activation = nn::Activation::swiglu;
  nn::FeedForward dense("mlp", fo);
  dense.initialize(2);

  Tensor x = Tensor::empty({tokens, D}, DType::f32);
  fill_uniform(x, CounterRng(3, "bench"), -1, 1);
  x = x.to(dtype);  // the activations arrive in the compute dtype
  nn::ForwardContext ctx;
  ctx.training = true;
  ctx.compute_dtype = dtype;

  auto step_moe = [&] {
    nn::AuxLosses aux;
    nn::ForwardContext c = ctx;
    c.aux = &aux;
    Variable y = ag::cast(ag::sum(moe.forward(Variable(x, true), c)), DType::f32);  // aux losses are f32
    Variable loss = ag::add(y, aux.total());
    loss.backward();
    moe.zero_grad();
  };
  auto step_dense = [&] {
    ag::sum(dense.forward(Variable(x, true), ctx)).backward();
    dense.zero_grad();
  };
  const double t_moe = median_seconds(reps, step_moe);
  const double t_dense = median_seconds(reps, step_dense);
  fmt::print("tokens {} d_model {} experts {} top-{} expert d_ff {} vs dense d_ff {}, {}, {} threads\n", tokens, D, E,
             K, F, K * F, (dtype == DType::bf16 ? "bf16" : "f32"), num_threads());
  fmt::print("moe step    {:8.2f} ms (median of {})\n", t_moe * 1e3, reps);
  fmt::print("dense step  {:8.2f} ms\n", t_dense * 1e3);
  fmt::print("ratio moe/dense {:.2f}\n", t_moe / t_dense);
  return 0;
}
