// Block-sparse attention (model.sparse_attention, DeepSpeed's modes) against dense causal attention, both
// forward + backward, timed in the same run: one sequence of T tokens, 8 heads of 64 (GPT-2-small's head
// size), f32, causal. For each T and each layout it prints the layout's density (the kept share of the
// block pairs a causal dense attention computes) and the time ratio sparse / dense: the kernels visit only
// the layout's blocks, so the ratio should follow the density (the per-block overhead of small blocks aside).
//
//   sparse_attention_bench [--sizes 4096,16384] [--reps 3] [--threads 1]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "trident/core/parallel.h"
#include "trident/core/rng.h"
#include "trident/models/sparse_attention.h"
#include "trident/ops/attention.h"

namespace {

using namespace trident;

double median_seconds(int reps, const std::function<void()>& f) {
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> sizes = {4096, 16384};
  int reps = 3, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--sizes") {
      sizes.clear();
      std::stringstream in(v);
      for (std::string x; std::getline(in, x, ',');) sizes.push_back(std::atoll(x.c_str()));
    } else if (a == "--reps") {
      reps = std::atoi(v.c_str());
    } else if (a == "--threads") {
      threads = std::atoi(v.c_str());
    }
  }
  set_num_threads(threads);
  const std::int64_t H = 8, D = 64;
  struct Layout {
    std::string name;
    models::SparseAttentionSpec spec;
  };
  std::vector<Layout> layouts;
  {
    models::SparseAttentionSpec s;  // DeepSpeed's defaults: fixed, blocks of 16, 4 local, 1 global
    s.mode = "fixed";
    s.attention = "unidirectional";
    layouts.push_back({"fixed (block 16, 4 local, 1 global)", s});
    s.block = 64;
    layouts.push_back({"fixed (block 64, 4 local, 1 global)", s});
    models::SparseAttentionSpec b;
    b.mode = "bigbird";
    b.block = 64;
    b.num_random_blocks = 2;
    b.num_sliding_window_blocks = 3;
    b.num_global_blocks = 1;
    layouts.push_back({"bigbird (block 64, 2 random, window 3, 1 global)", b});
    models::SparseAttentionSpec l;
    l.mode = "bslongformer";
    l.block = 64;
    l.num_sliding_window_blocks = 5;
    l.attention = "unidirectional";
    layouts.push_back({"bslongformer (block 64, window 5, global 0)", l});
  }
  fmt::print("block-sparse vs dense causal attention, forward + backward, 1 × T × {} heads × {}, f32, {} thread(s), "
             "median of {}\n",
             H, D, threads, reps);
  fmt::print("{:>7}  {:<50} {:>9} {:>10} {:>10} {:>8}\n", "T", "layout", "density", "dense s", "sparse s", "ratio");
  for (std::int64_t T : sizes) {
    Tensor q = Tensor::empty({1, T, H, D}, DType::f32), k = Tensor::empty({1, T, H, D}, DType::f32);
    Tensor v = Tensor::empty({1, T, H, D}, DType::f32), g = Tensor::empty({1, T, H, D}, DType::f32);
    fill_uniform(q, CounterRng(1, "q"), -1, 1);
    fill_uniform(k, CounterRng(1, "k"), -1, 1);
    fill_uniform(v, CounterRng(1, "v"), -1, 1);
    fill_uniform(g, CounterRng(1, "g"), -1, 1);
    const auto step = [&](const ops::AttentionOptions& o) {
      auto [out, lse] = ops::attention(q, k, v, o);
      (void)ops::attention_backward(q, k, v, out, lse, g, o);
    };
    const ops::AttentionOptions dense;
    step(dense);  // warm-up
    const double dense_s = median_seconds(reps, [&] { step(dense); });
    for (const Layout& l : layouts) {
      ops::AttentionOptions o;
      o.block_layout = models::block_layout(l.spec, H, T);
      o.block = l.spec.block;
      const double density = models::layout_density(o.block_layout, true);
      const double sparse_s = median_seconds(reps, [&] { step(o); });
      fmt::print("{:>7}  {:<50} {:>9.3f} {:>10.3f} {:>10.3f} {:>8.3f}\n", T, l.name, density, dense_s, sparse_s,
                 sparse_s / dense_s);
    }
  }
  return 0;
}
