// Attention and softmax throughput at GPT-2-small head shapes (B=4, H=12, D=64,
// causal, T = S), in f32 and bf16, with ratios to the fp32 matmul peak measured
// in the same run (kernels/cpu/matmul.h).
//
// FLOP convention: forward = 4·B·H·T·S·D (QKᵀ and P·V, 2 FLOP per
// multiply-add) halved for the causal mask; backward = 2.5 × forward (dV, dP,
// dQ, dK plus the recomputed QKᵀ — FlashAttention's convention; the kernel
// actually recomputes QKᵀ and dP once more in its separate dq pass, 3.5 ×
// forward of real work), so forward+backward counts 3.5 × forward.
// Softmax throughput counts bytes moved: read x and write y (forward); read y,
// dy and write dx (backward).
//
// Two clocks. Wall time (median of the runs, and the fastest run) is what a
// user sees. On a shared machine the process is often descheduled, so the
// bench also reports GFLOP per CPU-second of the process (median) next to the
// fp32 GEMM's GFLOP per CPU-second — a per-core efficiency that the
// neighbours' load does not distort. With more than one thread the CPU clock
// also counts the OpenMP workers' spin-waiting, so read it with --threads 1.
//
// Sliding window: for each size T > W, causal forward+backward with
// window = W against the full causal call, timed in the same run; prints the
// ratio windowed / full next to the ratio of visible (query, key) pairs
// (W(W+1)/2 + (T−W)·W against T(T+1)/2), which the kernels' 64-key tiles
// round up.
//
// Dropout on the probabilities: for each size, causal forward+backward with
// attention dropout P against the same call without, timed in the same run
// (the mask is regenerated per tile row in the forward and both backward passes).
//
// Packed documents (AttentionOptions::document_starts): for each size, causal
// forward+backward over N equal documents per sample (--documents, 8) against
// the unmasked causal call, timed in the same run, next to the ratio of visible
// (query, key) pairs (N documents of T/N: about 1/N), which the 64-key tiles
// round up.
//
//   attention_bench [--seconds S] [--min-reps N] [--threads T] [--sizes 64,256,1024] [--window W]
//                   [--dropout P] [--documents N] [--no-peak]
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
#include "trident/core/tensor.h"
#include "trident/kernels/cpu/matmul.h"
#include "trident/kernels/cpu/softmax.h"
#include "trident/ops/attention.h"
#include "trident/ops/softmax.h"
#include "bench_clock.h"

namespace {

using trident::DType;
using trident::Tensor;
namespace kc = trident::kernels::cpu;

Tensor filled(trident::Shape shape, DType dtype, int salt) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  float* p = t.data<float>();
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>((i * 7 + salt) % 23 - 11) * 0.05f;
  return t.to(dtype);
}

struct Timing {
  double median = 0, best = 0, cpu = 0;  // wall seconds (median, fastest), process CPU seconds (median)
};

// Times `f` over at least `min_reps` runs and about `seconds` of wall time, after one warm-up.
Timing time_runs(const std::function<void()>& f, int min_reps, double seconds) {
  using clock = std::chrono::steady_clock;
  f();
  std::vector<double> wall, cpu;
  const auto start = clock::now();
  while (static_cast<int>(wall.size()) < min_reps ||
         std::chrono::duration<double>(clock::now() - start).count() < seconds) {
    const auto t0 = clock::now();
    const double c0 = trident::bench::process_cpu_seconds();
    f();
    cpu.push_back(trident::bench::process_cpu_seconds() - c0);
    wall.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    if (wall.size() >= 100) break;
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], wall.front(), cpu[cpu.size() / 2]};
}

// One forward and backward of attention with options o (on tensors that outlive the function).
std::function<void()> forward_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                       const trident::ops::AttentionOptions& o) {
  return [&q, &k, &v, &dout, o] {
    auto [out, lse] = trident::ops::attention(q, k, v, o);
    (void)trident::ops::attention_backward(q, k, v, out, lse, dout, o);
  };
}

// fp32 GEMM 1024³ in GFLOP per CPU-second (median), the per-core reference for the CPU-clock column.
double gemm_gflop_per_cpu_second(int min_reps, double seconds) {
  const std::int64_t n = 1024;
  Tensor a = filled({n, n}, DType::f32, 7), b = filled({n, n}, DType::f32, 8), c = Tensor::empty({n, n}, DType::f32);
  const kc::GemmShape shape{1, n, n, n};
  const Timing t = time_runs(
      [&] { kc::gemm(DType::f32, DType::f32, shape, 1.0, a.raw_data(), b.raw_data(), 0.0, c.raw_data()); }, min_reps,
      seconds);
  return 2.0 * static_cast<double>(n * n * n) / t.cpu * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  int min_reps = 3;
  double seconds = 1.0;
  bool peak = true;
  std::int64_t window = 128;
  double dropout = 0.1;
  std::int64_t documents = 8;
  std::vector<std::int64_t> sizes = {64, 256, 1024};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--min-reps" && i + 1 < argc) {
      min_reps = std::atoi(argv[++i]);
    } else if (arg == "--threads" && i + 1 < argc) {
      trident::set_num_threads(std::atoi(argv[++i]));
    } else if (arg == "--sizes" && i + 1 < argc) {
      sizes.clear();
      std::stringstream ss(argv[++i]);
      for (std::string item; std::getline(ss, item, ',');) sizes.push_back(std::atoll(item.c_str()));
    } else if (arg == "--window" && i + 1 < argc) {
      window = std::atoll(argv[++i]);
    } else if (arg == "--dropout" && i + 1 < argc) {
      dropout = std::atof(argv[++i]);
    } else if (arg == "--documents" && i + 1 < argc) {
      documents = std::atoll(argv[++i]);
    } else if (arg == "--no-peak") {
      peak = false;
    } else {
      fmt::print(stderr,
                 "usage: attention_bench [--seconds S] [--min-reps N] [--threads T] [--sizes 64,256,1024] "
                 "[--window W] [--dropout P] [--documents N] [--no-peak]\n");
      return 2;
    }
  }
  const std::int64_t B = 4, H = 12, D = 64;
  fmt::print("attention_bench: B={} H={} D={} causal, threads={}\n", B, H, D, trident::num_threads());
  double peak_wall = 0, peak_cpu = 0;
  if (peak) {
    peak_wall = kc::measure_matmul_peak_gflops(DType::f32);
    peak_cpu = gemm_gflop_per_cpu_second(min_reps, seconds);
    fmt::print("fp32 matmul peak: {:.1f} GFLOP/s (measure_matmul_peak_gflops, wall), {:.1f} GFLOP/cpu-s (1024³ GEMM)\n",
               peak_wall, peak_cpu);
  }
  auto ratio = [](double g, double p) { return p > 0 ? fmt::format("{:5.2f}", g / p) : std::string("    -"); };

  fmt::print("\nwall: median (fastest); cpu: median GFLOP per process CPU-second; ratios to the fp32 peak\n");
  fmt::print("{:<5} {:>5} {:>8} {:>17} {:>9} {:>17} {:>6} {:>9} {:>6}\n", "dtype", "T=S", "fwd ms", "fwd GFLOP/s",
             "f+b ms", "f+b GFLOP/s", "ratio", "f+b cpu", "ratio");
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (std::int64_t T : sizes) {
      Tensor q = filled({B, T, H, D}, dtype, 1), k = filled({B, T, H, D}, dtype, 2), v = filled({B, T, H, D}, dtype, 3);
      Tensor dout = filled({B, T, H, D}, dtype, 4);
      const double fwd_gflop = 4.0 * static_cast<double>(B * H * T * T * D) * 0.5 * 1e-9;
      const Timing fwd = time_runs([&] { (void)trident::ops::attention(q, k, v); }, min_reps, seconds);
      const Timing both = time_runs(
          [&] {
            auto [out, lse] = trident::ops::attention(q, k, v);
            (void)trident::ops::attention_backward(q, k, v, out, lse, dout);
          },
          min_reps, seconds);
      const double both_gflop = 3.5 * fwd_gflop;
      fmt::print("{:<5} {:>5} {:>8.2f} {:>7.1f} ({:>7.1f}) {:>9.2f} {:>7.1f} ({:>7.1f}) {:>6} {:>9.1f} {:>6}\n",
                 trident::dtype_name(dtype), T, fwd.median * 1e3, fwd_gflop / fwd.median, fwd_gflop / fwd.best,
                 both.median * 1e3, both_gflop / both.median, both_gflop / both.best,
                 ratio(both_gflop / both.median, peak_wall), both_gflop / both.cpu, ratio(both_gflop / both.cpu, peak_cpu));
    }
  }

  fmt::print("\nsliding window W={}: causal fwd+bwd, full vs windowed in the same run: median wall ms and median "
             "process CPU ms (use --threads 1 on a loaded machine)\n",
             window);
  fmt::print("{:<5} {:>5} {:>9} {:>9} {:>7} {:>11} {:>13} {:>9} {:>11}\n", "dtype", "T=S", "full ms", "window ms",
             "ratio", "full cpu-ms", "window cpu-ms", "cpu ratio", "pair ratio");
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (std::int64_t T : sizes) {
      if (window <= 0 || T <= window) continue;
      Tensor q = filled({B, T, H, D}, dtype, 1), k = filled({B, T, H, D}, dtype, 2), v = filled({B, T, H, D}, dtype, 3);
      Tensor dout = filled({B, T, H, D}, dtype, 4);
      trident::ops::AttentionOptions full, windowed;
      windowed.window = window;
      auto step = [&](const trident::ops::AttentionOptions& o) { return forward_backward(q, k, v, dout, o); };
      const Timing t_full = time_runs(step(full), min_reps, seconds);
      const Timing t_window = time_runs(step(windowed), min_reps, seconds);
      const double pairs_full = 0.5 * static_cast<double>(T) * static_cast<double>(T + 1);
      const double pairs_window =
          0.5 * static_cast<double>(window) * static_cast<double>(window + 1) + static_cast<double>((T - window) * window);
      fmt::print("{:<5} {:>5} {:>9.2f} {:>9.2f} {:>7.3f} {:>11.2f} {:>13.2f} {:>9.3f} {:>11.3f}\n",
                 trident::dtype_name(dtype), T, t_full.median * 1e3, t_window.median * 1e3,
                 t_window.median / t_full.median, t_full.cpu * 1e3, t_window.cpu * 1e3, t_window.cpu / t_full.cpu,
                 pairs_window / pairs_full);
    }
  }

  fmt::print("\nattention dropout p={}: causal fwd+bwd without and with it in the same run: median wall ms and "
             "median process CPU ms\n",
             dropout);
  fmt::print("{:<5} {:>5} {:>9} {:>10} {:>7} {:>11} {:>12} {:>9}\n", "dtype", "T=S", "plain ms", "dropout ms", "ratio",
             "plain cpu-ms", "dropout cpu-ms", "cpu ratio");
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (std::int64_t T : sizes) {
      if (dropout <= 0) continue;
      Tensor q = filled({B, T, H, D}, dtype, 1), k = filled({B, T, H, D}, dtype, 2), v = filled({B, T, H, D}, dtype, 3);
      Tensor dout = filled({B, T, H, D}, dtype, 4);
      trident::ops::AttentionOptions plain, dropped;
      dropped.dropout = {dropout, trident::CounterRng(1, "bench/attention"), 0, 0, 0};
      auto step = [&](const trident::ops::AttentionOptions& o) { return forward_backward(q, k, v, dout, o); };
      const Timing t_plain = time_runs(step(plain), min_reps, seconds);
      const Timing t_drop = time_runs(step(dropped), min_reps, seconds);
      fmt::print("{:<5} {:>5} {:>9.2f} {:>10.2f} {:>7.3f} {:>11.2f} {:>12.2f} {:>9.3f}\n", trident::dtype_name(dtype), T,
                 t_plain.median * 1e3, t_drop.median * 1e3, t_drop.median / t_plain.median, t_plain.cpu * 1e3,
                 t_drop.cpu * 1e3, t_drop.cpu / t_plain.cpu);
    }
  }

  fmt::print("\npacked documents: {} equal documents per sample against none, causal fwd+bwd in the same run: "
             "median wall ms and median process CPU ms\n",
             documents);
  fmt::print("{:<5} {:>5} {:>9} {:>12} {:>7} {:>11} {:>15} {:>9} {:>11}\n", "dtype", "T=S", "plain ms", "documents ms",
             "ratio", "plain cpu-ms", "documents cpu-ms", "cpu ratio", "pair ratio");
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (std::int64_t T : sizes) {
      if (documents <= 1 || T < documents) continue;
      Tensor q = filled({B, T, H, D}, dtype, 1), k = filled({B, T, H, D}, dtype, 2), v = filled({B, T, H, D}, dtype, 3);
      Tensor dout = filled({B, T, H, D}, dtype, 4);
      std::vector<std::int32_t> starts(static_cast<std::size_t>(B * T));
      const std::int64_t length = T / documents;  // the last document takes the remainder
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t t = 0; t < T; ++t)
          starts[static_cast<std::size_t>(b * T + t)] =
              static_cast<std::int32_t>(std::min(t / length, documents - 1) * length);
      trident::ops::AttentionOptions plain, packed;
      packed.document_starts = Tensor::from_vector<std::int32_t>(starts, {B, T});
      auto step = [&](const trident::ops::AttentionOptions& o) { return forward_backward(q, k, v, dout, o); };
      const Timing t_plain = time_runs(step(plain), min_reps, seconds);
      const Timing t_docs = time_runs(step(packed), min_reps, seconds);
      double pairs_docs = 0;
      for (std::int64_t d = 0; d < documents; ++d) {
        const double n = static_cast<double>(d + 1 < documents ? length : T - length * (documents - 1));
        pairs_docs += 0.5 * n * (n + 1);
      }
      const double pairs_full = 0.5 * static_cast<double>(T) * static_cast<double>(T + 1);
      fmt::print("{:<5} {:>5} {:>9.2f} {:>12.2f} {:>7.3f} {:>11.2f} {:>15.2f} {:>9.3f} {:>11.3f}\n",
                 trident::dtype_name(dtype), T, t_plain.median * 1e3, t_docs.median * 1e3,
                 t_docs.median / t_plain.median, t_plain.cpu * 1e3, t_docs.cpu * 1e3, t_docs.cpu / t_plain.cpu,
                 pairs_docs / pairs_full);
    }
  }

  const std::int64_t rows = 4 * 12 * 1024, cols = 1024;
  fmt::print("\nsoftmax [{}, {}], kernels into preallocated outputs: median GB/s (fastest)\n", rows, cols);
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor x = filled({rows, cols}, dtype, 5), dy = filled({rows, cols}, dtype, 6);
    Tensor y = trident::ops::softmax(x), dx = Tensor::empty(x.shape(), dtype);
    const double bytes = static_cast<double>(rows * cols) * static_cast<double>(trident::dtype_size(dtype));
    const Timing fwd = time_runs(
        [&] { kc::softmax_forward(dtype, x.raw_data(), y.raw_data(), rows, cols); }, min_reps, seconds);
    const Timing bwd = time_runs(
        [&] { kc::softmax_backward(dtype, y.raw_data(), dy.raw_data(), dx.raw_data(), rows, cols); }, min_reps, seconds);
    const Timing op = time_runs([&] { (void)trident::ops::softmax(x); }, min_reps, seconds);
    fmt::print("{:<5} forward {:6.2f} ms {:5.1f} ({:5.1f})   backward {:6.2f} ms {:5.1f} ({:5.1f})   "
               "ops::softmax with allocation {:6.2f} ms\n",
               trident::dtype_name(dtype), fwd.median * 1e3, 2 * bytes / fwd.median * 1e-9, 2 * bytes / fwd.best * 1e-9,
               bwd.median * 1e3, 3 * bytes / bwd.median * 1e-9, 3 * bytes / bwd.best * 1e-9, op.median * 1e3);
  }
  return 0;
}
