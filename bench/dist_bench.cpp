// Distributed benchmarks (run under mpirun / trident launch):
//
//   dist_bench memory    per-rank bytes of parameters, gradients and optimiser
//                        state for ZeRO 0–3 against the formulas
//   dist_bench allreduce all-reduce bus bandwidth through trident's communicator
//                        and through raw MPI_Allreduce on the same buffers
//   dist_bench alltoall  all-to-all (all_to_all, equal counts) bus bandwidth through trident's
//                        communicator and through raw MPI_Alltoallv on the same buffers
//   dist_bench overlap   fraction of data-parallel gradient communication hidden
//                        behind backward (bucketed all-reduce launched from hooks)
//   dist_bench tensor    tensor parallelism over all ranks: bytes communicated per
//                        transformer layer (forward + backward) against the theory,
//                        with and without sequence parallelism, and per-rank
//                        activation memory per layer against the unsharded layer
//
// e.g. build/bin/trident launch -n 2 -- build/bin/dist_bench memory
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "trident/autograd/autograd.h"
#include "trident/core/memory.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/models/transformer_lm.h"
#include "trident/optim/optimizer.h"
#include "trident/parallel/data/grad_sync.h"
#include "trident/parallel/tensor/mappings.h"
#include "trident/parallel/zero/zero_optimizer.h"
#include "bench_clock.h"

using namespace trident;

namespace {

// Seconds `fn` takes on this rank, started together with every rank's (after a barrier).
template <typename Fn>
double seconds_after_barrier(dist::Communicator& world, Fn&& fn) {
  world.barrier();
  const double t0 = bench::wall_seconds();
  fn();
  return bench::wall_seconds() - t0;
}

Tensor random_ids(std::mt19937_64& gen, std::int64_t B, std::int64_t T, std::int64_t V) {
  std::uniform_int_distribution<std::int64_t> d(0, V - 1);
  Tensor t = Tensor::empty({B, T}, DType::i64);
  for (auto& x : t.span<std::int64_t>()) x = d(gen);
  return t;
}

models::TransformerSpec bench_spec() {
  models::TransformerSpec s = models::preset("gpt2-small-corpus");  // 4 layers, d = 256, V = 4096
  return s;
}

// One training step (B=2, T=64) of the bench model under ZeRO `stage`; returns this rank's bytes by category.
MemoryStats memory_of_stage(const std::shared_ptr<dist::Communicator>& world, int stage, double* psi) {
  models::TransformerLM model(bench_spec());
  model.initialize(1);
  *psi = static_cast<double>(model.num_parameters());
  std::unique_ptr<optim::AdamW> adamw;
  std::unique_ptr<parallel::ZeroOptimizer> zero;
  std::unique_ptr<parallel::GradSync> sync;
  if (stage == 0) {
    adamw = std::make_unique<optim::AdamW>(model.parameters(), optim::AdamWOptions{});
    (void)adamw->state();
    sync = std::make_unique<parallel::GradSync>(model.parameters(), world, parallel::GradSyncOptions{});
  } else {
    zero = std::make_unique<parallel::ZeroOptimizer>(stage, model.parameters(), world, optim::AdamWOptions{});
  }
  std::mt19937_64 gen(static_cast<std::uint64_t>(world->rank()));
  nn::ForwardContext ctx;
  ctx.training = true;
  model.set_parameter_gatherer(stage == 3 ? zero.get() : nullptr);
  if (sync) sync->begin_micro_batch(true);
  model.loss(random_ids(gen, 2, 64, 4096), random_ids(gen, 2, 64, 4096), ctx).backward();
  if (sync) sync->finish();
  if (zero) {
    zero->reduce_gradients(true);
    zero->step(1e-4, 1.0);
  } else {
    adamw->step(1e-4);
  }
  return memory_stats(Device::cpu());
}

void bench_memory(const std::shared_ptr<dist::Communicator>& world) {
  const double n = world->size();
  if (world->rank() == 0) {
    fmt::print("ZeRO memory per rank, fp32 AdamW, {} ranks (MiB; formula: weights 4Ψ, gradients 4Ψ, moments 8Ψ, the "
               "stage's share divided by N)\n", world->size());
    fmt::print("{:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}\n", "stage", "params", "grads", "optim", "total",
               "formula", "ratio");
  }
  const auto idx = [](MemoryCategory c) { return static_cast<std::size_t>(c); };
  for (int stage = 0; stage <= 3; ++stage) {
    const MemoryStats before = memory_stats(Device::cpu());
    double psi = 0;
    const MemoryStats s = memory_of_stage(world, stage, &psi);
    const double mib = 1 << 20;
    const double p = static_cast<double>(s.current_by_category[idx(MemoryCategory::parameters)] -
                                         before.current_by_category[idx(MemoryCategory::parameters)]);
    const double g = static_cast<double>(s.current_by_category[idx(MemoryCategory::gradients)] -
                                         before.current_by_category[idx(MemoryCategory::gradients)]);
    const double o = static_cast<double>(s.current_by_category[idx(MemoryCategory::optimizer)] -
                                         before.current_by_category[idx(MemoryCategory::optimizer)]);
    const double fp = stage >= 3 ? 4 * psi / n : 4 * psi;
    const double fg = stage >= 2 ? 4 * psi / n : 4 * psi;
    const double fo = stage >= 1 ? 8 * psi / n : 8 * psi;
    const double total = p + g + o, formula = fp + fg + fo;
    if (world->rank() == 0) {
      fmt::print("{:>5} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>8.3f}\n", stage, p / mib, g / mib, o / mib,
                 total / mib, formula / mib, total / formula);
    }
  }
}

void bench_allreduce(const std::shared_ptr<dist::Communicator>& world) {
  const int n = world->size();
  if (world->rank() == 0) {
    fmt::print("all-reduce (sum, f32), {} ranks: bus bandwidth = 2(n-1)/n · bytes / time, median of 40; trident = the\n"
               "blocking form under the timeout watchdog (all_reduce_sync), async = the non-blocking Work polled to\n"
               "completion (what overlapped gradient buckets use); overhead = trident vs raw MPI_Allreduce\n", n);
    fmt::print("{:>10} {:>16} {:>16} {:>14} {:>10}\n", "bytes", "trident GB/s", "trident async", "raw MPI GB/s",
               "overhead");
  }
  for (std::int64_t bytes = 1 << 10; bytes <= (64 << 20); bytes *= 4) {
    Tensor t = Tensor::full({bytes / 4}, 1.0);
    // The three forms alternate within each repetition, so the machine's load drifts affect them alike.
    std::vector<double> t_ours, t_async, t_raw;
    for (int i = 0; i < 43; ++i) {
      const double a = seconds_after_barrier(*world, [&] { world->all_reduce_sync(t); });
      const double b = seconds_after_barrier(*world, [&] { world->all_reduce(t)->wait(); });
      const double c = seconds_after_barrier(*world, [&] {
        MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), static_cast<int>(t.numel()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      });
      if (i >= 3) {
        t_ours.push_back(a);
        t_async.push_back(b);
        t_raw.push_back(c);
      }
    }
    auto med = [&](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return world->all_reduce_scalar(v[v.size() / 2], dist::ReduceOp::max);
    };
    const double ours = med(t_ours), async = med(t_async), raw = med(t_raw);
    const double factor = 2.0 * (n - 1) / n * static_cast<double>(bytes) / 1e9;
    if (world->rank() == 0) {
      fmt::print("{:>10} {:>16.3f} {:>16.3f} {:>14.3f} {:>9.1f}%\n", bytes, factor / ours, factor / async, factor / raw,
                 100 * (ours / raw - 1));
    }
  }
}

// all_to_all of `bytes` per rank (f32, an equal block for every rank, counts passed as for MoE dispatch)
// against MPI_Alltoallv on the same buffers and counts, interleaved within each repetition.
void bench_alltoall(const std::shared_ptr<dist::Communicator>& world) {
  const int n = world->size();
  if (world->rank() == 0) {
    fmt::print(
        "all-to-all (f32, equal blocks), {} ranks: bus bandwidth = (n-1)/n · bytes per rank / time, median of\n"
        "40; trident = all_to_all with blocking (MPI_Alltoallv under the timeout watchdog), async = the\n"
        "non-blocking Work (MPI_Ialltoallv) polled to completion; ratio = trident / raw MPI_Alltoallv\n",
        n);
    fmt::print("{:>10} {:>16} {:>16} {:>14} {:>8} {:>8}\n", "bytes", "trident GB/s", "trident async", "raw MPI GB/s",
               "ratio", "async");
  }
  for (std::int64_t bytes = 64 << 10; bytes <= (16 << 20); bytes *= 4) {
    const std::int64_t block = bytes / 4 / n;  // f32 elements to each rank
    const std::vector<std::int64_t> counts(static_cast<std::size_t>(n), block);
    Tensor in = Tensor::full({block * n}, world->rank()), out = Tensor::zeros({block * n});
    std::vector<int> c(static_cast<std::size_t>(n), static_cast<int>(block)), d(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) d[static_cast<std::size_t>(r)] = r * static_cast<int>(block);
    dist::CollectiveOptions blocking;
    blocking.blocking = true;
    std::vector<double> t_ours, t_async, t_raw;
    // The three forms take turns going first, so neither the order nor the machine's load drifts favour one.
    const std::function<void()> forms[3] = {[&] { world->all_to_all(in, counts, out, counts, blocking)->wait(); },
                                            [&] { world->all_to_all(in, counts, out, counts)->wait(); },
                                            [&] {
                                              MPI_Alltoallv(in.raw_data(), c.data(), d.data(), MPI_FLOAT,
                                                            out.raw_data(), c.data(), d.data(), MPI_FLOAT,
                                                            MPI_COMM_WORLD);
                                            }};
    std::vector<double>* times[3] = {&t_ours, &t_async, &t_raw};
    for (int i = 0; i < 43; ++i) {
      for (int k = 0; k < 3; ++k) {
        const int form = (i + k) % 3;
        const double t = seconds_after_barrier(*world, forms[form]);
        if (i >= 3) times[form]->push_back(t);
      }
    }
    auto med = [&](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return world->all_reduce_scalar(v[v.size() / 2], dist::ReduceOp::max);
    };
    const double ours = med(t_ours), async = med(t_async), raw = med(t_raw);
    const double moved = static_cast<double>(n - 1) / n * static_cast<double>(block * n * 4) / 1e9;
    if (world->rank() == 0) {
      fmt::print("{:>10} {:>16.3f} {:>16.3f} {:>14.3f} {:>8.3f} {:>8.3f}\n", block * n * 4, moved / ours, moved / async,
                 moved / raw, raw / ours, raw / async);
    }
  }
}

void bench_overlap(const std::shared_ptr<dist::Communicator>& world) {
  models::TransformerLM model(bench_spec());
  model.initialize(1);
  std::mt19937_64 gen(static_cast<std::uint64_t>(world->rank()));
  auto run = [&](bool overlap, double* backward_s, double* exposed_s) {
    parallel::GradSync sync(model.parameters(), world, parallel::GradSyncOptions{2.0, overlap});
    std::vector<double> exposed, total;
    for (int i = 0; i < 6; ++i) {
      sync.zero_grad();
      sync.begin_micro_batch(true);
      nn::ForwardContext ctx;
      ctx.training = true;
      model.loss(random_ids(gen, 4, 64, 4096), random_ids(gen, 4, 64, 4096), ctx).backward();
      sync.finish();
      if (i > 0) {
        exposed.push_back(sync.stats().exposed_seconds);
        total.push_back(sync.stats().backward_seconds);
      }
    }
    std::sort(exposed.begin(), exposed.end());
    std::sort(total.begin(), total.end());
    *exposed_s = world->all_reduce_scalar(exposed[exposed.size() / 2], dist::ReduceOp::max);
    *backward_s = world->all_reduce_scalar(total[total.size() / 2], dist::ReduceOp::max);
    return sync.bucket_count();
  };
  double b0 = 0, e0 = 0, b1 = 0, e1 = 0;
  run(false, &b0, &e0);  // all buckets launched after backward: every second of communication is exposed
  const std::size_t buckets = run(true, &b1, &e1);
  if (world->rank() == 0) {
    fmt::print("gradient all-reduce, {} ranks, {} buckets of 2 MiB, {:.1f} MiB of gradients\n", world->size(), buckets,
               static_cast<double>(model.num_parameters()) * 4 / (1 << 20));
    fmt::print("communication after backward (no overlap): {:.2f} ms; exposed with overlap: {:.2f} ms; hidden: "
               "{:.0f}%\n", e0 * 1e3, e1 * 1e3, e0 > 0 ? 100 * std::max(0.0, 1 - e1 / e0) : 0.0);
  }
}

}  // namespace

// Per transformer layer, fp32, GPT-2 block (b = 4, s = 256, h = 512, 8 heads).
void bench_tensor(const std::shared_ptr<dist::Communicator>& world) {
  const int t = world->size();
  const bool root = world->rank() == 0;
  models::TransformerSpec spec = models::preset("gpt2-tiny");
  spec.n_head = spec.n_kv_head = 8;
  spec.d_model = 512;
  spec.d_ff = 4 * spec.d_model;
  spec.dropout = 0.1;
  const std::int64_t b = 4, s = 256, h = spec.d_model, L = 4;
  spec.n_layer = L;
  spec.max_seq_len = s;
  const double sbh = static_cast<double>(s * b * h), elem = 4.0;  // fp32
  if (root) {
    fmt::print("tensor parallelism over {} ranks: GPT-2 blocks b={} s={} h={} heads={}, fp32, dropout on\n", t, b, s, h,
               spec.n_head);
  }
  auto stack = [&](const nn::TensorParallel& tp) {
    const models::Family& family = models::family(spec.family);
    std::vector<std::unique_ptr<nn::Layer>> blocks;
    for (std::int64_t i = 0; i < L; ++i) {
      blocks.push_back(family.make_block(fmt::format("h.{}", i), spec, i, tp));
      blocks.back()->initialize(1);
    }
    return blocks;
  };
  std::mt19937_64 gen(7);
  Tensor x0 = Tensor::empty({b, s, h}, DType::f32);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& v : x0.span<float>()) v = nd(gen);
  nn::ForwardContext ctx;
  ctx.training = true;
  ctx.seed = 3;
  // Activation bytes per layer kept for backward (forward of L blocks, before backward), and communication.
  struct Result {
    double act_bytes = 0;
    double all_reduce = 0, reduce_scatter = 0, all_gather = 0;  // bytes per layer
  };
  auto measure = [&](const nn::TensorParallel& tp) {
    auto blocks = stack(tp);
    Result r;
    const bool split = tp.sequence_split();
    Tensor input = split ? parallel::split_dim(x0, 1, tp.rank(), tp.size()).clone() : x0.clone();
    const nn::ForwardContext c = nn::sequence_context(ctx, tp, input.size(1));
    const dist::TrafficCounters before = tp.group ? tp.group->traffic() : dist::TrafficCounters{};
    const std::int64_t mem0 = memory_stats(Device::cpu()).current;
    autograd::Variable x(input, true);
    autograd::Variable y = x;
    for (auto& blk : blocks) y = blk->forward(y, c);
    r.act_bytes = static_cast<double>(memory_stats(Device::cpu()).current - mem0) / static_cast<double>(L);
    autograd::sum(y).backward();
    if (tp.group) {
      const dist::TrafficCounters after = tp.group->traffic();
      auto per_layer = [&](std::int64_t a, std::int64_t z) { return static_cast<double>(a - z) / static_cast<double>(L); };
      r.all_reduce = per_layer(after.all_reduce_bytes, before.all_reduce_bytes);
      r.reduce_scatter = per_layer(after.reduce_scatter_bytes, before.reduce_scatter_bytes);
      r.all_gather = per_layer(after.all_gather_bytes, before.all_gather_bytes);
    }
    return r;
  };
  const Result none = measure(nn::TensorParallel{});
  const Result tp = measure(nn::TensorParallel{world, false});
  const Result sp = measure(nn::TensorParallel{world, true});
  if (!root) return;
  // Wire bytes per rank of a ring: all-reduce 2(t−1)/t·N, all-gather and reduce-scatter (t−1)/t·N.
  const double ring = static_cast<double>(t - 1) / static_cast<double>(t);
  auto wire = [&](const Result& c) { return ring * (2.0 * c.all_reduce + c.reduce_scatter + c.all_gather); };
  const double theory = 4.0 * sbh * elem;  // 2 all-reduces forward + 2 backward of s·b·h elements
  const double mb = 1024.0 * 1024.0;
  fmt::print("communication per layer (payload counted by the communicator):\n");
  fmt::print("  TP    all-reduce {:8.3f} MiB   theory 4·sbh = {:8.3f} MiB   ratio {:.4f}\n",
             tp.all_reduce / mb, theory / mb, tp.all_reduce / theory);
  fmt::print("  TP+SP reduce-scatter {:8.3f} MiB + all-gather {:8.3f} MiB   theory 4·sbh each   ratios {:.4f} {:.4f}\n",
             sp.reduce_scatter / mb, sp.all_gather / mb,
             sp.reduce_scatter / theory, sp.all_gather / theory);
  fmt::print("        + all-reduce of replicated parameters' gradients {:.1f} KiB (norm weights and biases, "
             "{:.0f}·h elements)\n",
             sp.all_reduce / 1024.0, sp.all_reduce / elem / static_cast<double>(h));
  fmt::print("  ring wire bytes per rank: TP {:.3f} MiB, TP+SP {:.3f} MiB (ratio {:.4f}; theory 8(t−1)/t·sbh = "
             "{:.3f} MiB)\n",
             wire(tp) / mb, wire(sp) / mb, wire(sp) / wire(tp),
             8.0 * ring * sbh * elem / mb);
  // Korthikanti et al. 2022 without the a·s² attention-score terms (flash attention keeps no scores):
  // none 34·sbh, TP (10 + 24/t)·sbh, TP+SP 34·sbh/t — ratios to the unsharded layer.
  fmt::print("activation memory per layer per rank (saved for backward):\n");
  fmt::print("  unsharded {:8.2f} MiB\n", none.act_bytes / mb);
  fmt::print("  TP        {:8.2f} MiB   ratio {:.3f}   (Korthikanti (10 + 24/t)/34 = {:.3f})\n", tp.act_bytes / mb,
             tp.act_bytes / none.act_bytes, (10.0 + 24.0 / static_cast<double>(t)) / 34.0);
  fmt::print("  TP+SP     {:8.2f} MiB   ratio {:.3f}   (Korthikanti 1/t = {:.3f})\n", sp.act_bytes / mb,
             sp.act_bytes / none.act_bytes, 1.0 / static_cast<double>(t));
}

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  auto world = dist::mpi_world(600.0);
  if (what == "memory" || what == "all") bench_memory(world);
  if (what == "allreduce" || what == "all") bench_allreduce(world);
  if (what == "alltoall" || what == "all") bench_alltoall(world);
  if (what == "overlap" || what == "all") bench_overlap(world);
  if (what == "tensor" || what == "all") bench_tensor(world);
  world.reset();
  dist::finalize();
  return 0;
}
