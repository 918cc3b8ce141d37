// Attention and softmax throughput at GPT-2-small head shapes (B=4, H=12, D=64,
// causal, T = S), in f32 and bf16, with the ratio to the fp32 matmul peak
// measured in the same run (kernels/cpu/matmul.h).
//
// FLOP convention: forward = 4·B·H·T·S·D (QKᵀ and P·V, 2 FLOP per
// multiply-add) halved for the causal mask; backward = 2.5 × forward (dV, dP,
// dQ, dK plus the recomputed QKᵀ — FlashAttention's convention; the kernel
// actually recomputes QKᵀ and dP once more in its separate dq pass), so
// forward+backward = 3.5 × forward. Softmax throughput counts bytes moved:
// read x and write y (forward); read y, dy and write dx (backward).
//
//   attention_bench [--seconds S] [--min-reps N] [--threads T] [--sizes 64,256,1024] [--no-peak]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "trident/core/parallel.h"
#include "trident/core/tensor.h"
#include "trident/kernels/cpu/matmul.h"
#include "trident/ops/attention.h"
#include "trident/ops/softmax.h"
#include "trident/kernels/cpu/softmax.h"

namespace {

using trident::DType;
using trident::Tensor;
namespace kc = trident::kernels::cpu;

Tensor filled(trident::Shape shape, DType dtype, int salt) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>((i * 7 + salt) % 23 - 11) * 0.05f;
  return t.to(dtype);
}

struct Timing {
  double median = 0, best = 0;  // seconds
};

// Median and fastest of `f` over at least `min_reps` runs and about `seconds`, after one warm-up.
// The fastest run shows what the kernel does when the shared machine leaves it alone.
Timing time_runs(const std::function<void()>& f, int min_reps, double seconds) {
  using clock = std::chrono::steady_clock;
  f();
  std::vector<double> times;
  const auto start = clock::now();
  while (static_cast<int>(times.size()) < min_reps ||
         std::chrono::duration<double>(clock::now() - start).count() < seconds) {
    const auto t0 = clock::now();
    f();
    times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    if (times.size() >= 100) break;
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front()};
}

}  // namespace

int main(int argc, char** argv) {
  int min_reps = 3;
  double seconds = 1.0;
  bool peak = true;
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
    } else if (arg == "--no-peak") {
      peak = false;
    } else {
      fmt::print(stderr, "usage: attention_bench [--seconds S] [--min-reps N] [--threads T] [--sizes 64,256,1024] [--no-peak]\n");
      return 2;
    }
  }
  const std::int64_t B = 4, H = 12, D = 64;
  fmt::print("attention_bench: B={} H={} D={} causal, threads={}\n", B, H, D, trident::num_threads());
  const double peak_gflops = peak ? trident::kernels::cpu::measure_matmul_peak_gflops(DType::f32) : 0.0;
  if (peak) fmt::print("fp32 matmul peak (measured): {:.1f} GFLOP/s\n", peak_gflops);
  auto ratio = [&](double g) { return peak ? fmt::format("  {:.2f} of fp32 peak", g / peak_gflops) : std::string(); };

  fmt::print("\nmedians (best in parentheses)\n{:<6} {:>6} {:>9} {:>18} {:>11} {:>18}\n", "dtype", "T=S", "fwd ms",
             "fwd GFLOP/s", "fwd+bwd ms", "fwd+bwd GFLOP/s");
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
      fmt::print("{:<6} {:>6} {:>9.2f} {:>8.1f} ({:>6.1f}) {:>11.2f} {:>8.1f} ({:>6.1f}){}\n", trident::dtype_name(dtype), T,
                 fwd.median * 1e3, fwd_gflop / fwd.median, fwd_gflop / fwd.best, both.median * 1e3,
                 3.5 * fwd_gflop / both.median, 3.5 * fwd_gflop / both.best, ratio(3.5 * fwd_gflop / both.median));
    }
  }

  const std::int64_t rows = 4 * 12 * 1024, cols = 1024;
  fmt::print("\nsoftmax [{}, {}]\n", rows, cols);
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor x = filled({rows, cols}, dtype, 5), dy = filled({rows, cols}, dtype, 6);
    Tensor y = trident::ops::softmax(x), dx = Tensor::empty(x.shape(), dtype);
    const double bytes = static_cast<double>(rows * cols) * static_cast<double>(trident::dtype_size(dtype));
    // The kernels into preallocated outputs: a fresh output of this size is a new mmap
    // whose first-touch page faults would otherwise dominate (glibc maps blocks > 32 MiB).
    const Timing fwd = time_runs(
        [&] { kc::softmax_forward(dtype, x.raw_data(), y.raw_data(), rows, cols); }, min_reps, seconds);
    const Timing bwd = time_runs(
        [&] { kc::softmax_backward(dtype, y.raw_data(), dy.raw_data(), dx.raw_data(), rows, cols); }, min_reps, seconds);
    const Timing op = time_runs([&] { (void)trident::ops::softmax(x); }, min_reps, seconds);
    fmt::print("{:<6} forward {:6.2f} ms {:5.1f} GB/s ({:5.1f})   backward {:6.2f} ms {:5.1f} GB/s ({:5.1f})   "
               "ops::softmax (allocating) {:6.2f} ms\n",
               trident::dtype_name(dtype), fwd.median * 1e3, 2 * bytes / fwd.median * 1e-9, 2 * bytes / fwd.best * 1e-9,
               bwd.median * 1e3, 3 * bytes / bwd.median * 1e-9, 3 * bytes / bwd.best * 1e-9, op.median * 1e3);
  }
  return 0;
}
