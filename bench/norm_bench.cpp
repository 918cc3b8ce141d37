// Memory throughput of the norm, activation and dropout kernels at GPT-2/LLaMA
// shapes, in f32 and bf16, called on preallocated buffers (no allocation timed).
//
// GB/s counts the compulsory traffic of each kernel: every tensor it must read
// or write, once (a row that is re-read from L1 within the kernel is not
// counted again):
//   LayerNorm fwd: x, y (rows*C each), weight, bias (C), mean, rstd (rows, f32)
//   LayerNorm bwd: dy, x, dx (rows*C), weight, dweight, dbias (C), mean, rstd
//   RMSNorm fwd:   x, y, weight, rstd        RMSNorm bwd: dy, x, dx, weight, dweight, rstd
//   GELU-tanh fwd: x, y                      GELU-tanh bwd: dy, x, dx
//   SwiGLU fwd:    gate, up, out             dropout fwd:   x, y
// Each line also prints the ratio to a parallel memcpy of the same number of
// bytes measured in the same run (the practical ceiling of a streaming kernel).
//
//   norm_bench [--min-reps N] [--seconds S] [--threads T] [--only SUBSTRING]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "trident/core/parallel.h"
#include "trident/core/rng.h"
#include "trident/core/tensor.h"
#include "trident/kernels/cpu/activation.h"
#include "trident/kernels/cpu/dropout.h"
#include "trident/kernels/cpu/norm.h"

namespace {

using trident::DType;
using trident::Tensor;
namespace kc = trident::kernels::cpu;

int g_min_reps = 10;
double g_seconds = 0.5;
std::string g_only;  // run only the lines whose name contains this

bool selected(const std::string& name) { return g_only.empty() || name.find(g_only) != std::string::npos; }

double median_seconds(const std::function<void()>& f) {
  using clock = std::chrono::steady_clock;
  f();
  f();  // warm-up: page faults, thread start
  std::vector<double> times;
  const auto start = clock::now();
  while (static_cast<int>(times.size()) < g_min_reps ||
         std::chrono::duration<double>(clock::now() - start).count() < g_seconds) {
    const auto t0 = clock::now();
    f();
    times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    if (times.size() >= 1000) break;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

Tensor filled(trident::Shape shape, DType dtype, std::uint64_t salt, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f32);
  trident::fill_uniform(t, trident::CounterRng(salt, "bench"), lo, hi);
  return t.to(dtype);
}

// Parallel memcpy of `bytes` (read + write = 2 * bytes of traffic): the reference bandwidth.
double copy_gbps(std::size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes);
  const double s = median_seconds([&] {
    trident::parallel_for(0, static_cast<std::int64_t>(bytes), 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
      std::memcpy(dst.data() + lo, src.data() + lo, static_cast<std::size_t>(hi - lo));
    });
  });
  return 2.0 * static_cast<double>(bytes) / s * 1e-9;
}

void report(const std::string& name, DType dtype, double bytes, const std::function<void()>& kernel) {
  if (!selected(name)) return;
  const double seconds = median_seconds(kernel);
  const double gbps = bytes / seconds * 1e-9;
  // Copy of the same traffic: half read, half written.
  const double ref = copy_gbps(static_cast<std::size_t>(bytes / 2));
  fmt::print("{:<34} {:>5} {:>9.1f} us {:>8.2f} GB/s   {:.2f} of memcpy ({:.1f} GB/s)\n", name,
             trident::dtype_name(dtype), seconds * 1e6, gbps, gbps / ref, ref);
  std::fflush(stdout);
}

void bench_layer_norm(std::int64_t rows, std::int64_t cols, DType dtype) {
  const double es = static_cast<double>(trident::dtype_size(dtype));
  const double n = static_cast<double>(rows * cols), c = static_cast<double>(cols), r = static_cast<double>(rows);
  Tensor x = filled({rows, cols}, dtype, 1, -2, 3), w = filled({cols}, dtype, 2, 0.5, 1.5), b = filled({cols}, dtype, 3);
  Tensor dy = filled({rows, cols}, dtype, 4), y = Tensor::empty({rows, cols}, dtype), dx = Tensor::empty({rows, cols}, dtype);
  Tensor dw = Tensor::empty({cols}, dtype), db = Tensor::empty({cols}, dtype);
  Tensor mean = Tensor::empty({rows}, DType::f32), rstd = Tensor::empty({rows}, DType::f32);
  const std::string shape = fmt::format("[{}, {}]", rows, cols);
  auto forward = [&] {
    kc::layer_norm_forward(dtype, x.raw_data(), w.raw_data(), b.raw_data(), y.raw_data(), mean.raw_data(),
                           rstd.raw_data(), rows, cols, 1e-5);
  };
  forward();  // statistics for the backward
  report("layer_norm fwd " + shape, dtype, 2 * n * es + 2 * c * es + 2 * r * 4, forward);
  report("layer_norm bwd " + shape, dtype, 3 * n * es + 3 * c * es + 2 * r * 4, [&] {
    kc::layer_norm_backward(dtype, dy.raw_data(), x.raw_data(), w.raw_data(), mean.raw_data(), rstd.raw_data(),
                            dx.raw_data(), dw.raw_data(), db.raw_data(), rows, cols);
  });
}

void bench_rms_norm(std::int64_t rows, std::int64_t cols, DType dtype) {
  const double es = static_cast<double>(trident::dtype_size(dtype));
  const double n = static_cast<double>(rows * cols), c = static_cast<double>(cols), r = static_cast<double>(rows);
  Tensor x = filled({rows, cols}, dtype, 5), w = filled({cols}, dtype, 6, 0.5, 1.5), dy = filled({rows, cols}, dtype, 7);
  Tensor y = Tensor::empty({rows, cols}, dtype), dx = Tensor::empty({rows, cols}, dtype), dw = Tensor::empty({cols}, dtype);
  Tensor rstd = Tensor::empty({rows}, DType::f32);
  const std::string shape = fmt::format("[{}, {}]", rows, cols);
  auto forward = [&] {
    kc::rms_norm_forward(dtype, x.raw_data(), w.raw_data(), y.raw_data(), rstd.raw_data(), rows, cols, 1e-6);
  };
  forward();
  report("rms_norm fwd " + shape, dtype, 2 * n * es + c * es + r * 4, forward);
  report("rms_norm bwd " + shape, dtype, 3 * n * es + 2 * c * es + r * 4, [&] {
    kc::rms_norm_backward(dtype, dy.raw_data(), x.raw_data(), w.raw_data(), rstd.raw_data(), dx.raw_data(),
                          dw.raw_data(), rows, cols);
  });
}

void bench_elementwise(std::int64_t rows, std::int64_t cols, DType dtype) {
  const std::int64_t count = rows * cols;
  const double bytes = static_cast<double>(count) * static_cast<double>(trident::dtype_size(dtype));
  Tensor x = filled({rows, cols}, dtype, 8, -4, 4), dy = filled({rows, cols}, dtype, 9);
  Tensor y = Tensor::empty({rows, cols}, dtype), dx = Tensor::empty({rows, cols}, dtype);
  const std::string shape = fmt::format("[{}, {}]", rows, cols);
  report("gelu_tanh fwd " + shape, dtype, 2 * bytes, [&] {
           kc::activation_forward(kc::Activation::gelu_tanh, dtype, x.raw_data(), y.raw_data(), count);
         });
  report("gelu_tanh bwd " + shape, dtype, 3 * bytes, [&] {
           kc::activation_backward(kc::Activation::gelu_tanh, dtype, dy.raw_data(), x.raw_data(), dx.raw_data(), count);
         });
  report("swiglu fwd " + shape, dtype, 3 * bytes, [&] {
           kc::swiglu_forward(dtype, x.raw_data(), dy.raw_data(), y.raw_data(), count);
         });
  const trident::CounterRng rng(1, "bench/dropout");
  const trident::Shape local{rows, cols};
  report("dropout fwd " + shape, dtype, 2 * bytes, [&] {
           kc::dropout(dtype, x.raw_data(), y.raw_data(), local, 0.1, rng, {});
         });
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--min-reps" && i + 1 < argc) {
      g_min_reps = std::atoi(argv[++i]);
    } else if (arg == "--seconds" && i + 1 < argc) {
      g_seconds = std::atof(argv[++i]);
    } else if (arg == "--only" && i + 1 < argc) {
      g_only = argv[++i];
    } else if (arg == "--threads" && i + 1 < argc) {
      trident::set_num_threads(std::atoi(argv[++i]));
    } else {
      fmt::print(stderr, "usage: norm_bench [--min-reps N] [--seconds S] [--threads T] [--only SUBSTRING]\n");
      return 2;
    }
  }
  fmt::print("threads: {}   (median time; GB/s of compulsory traffic, see the header of bench/norm_bench.cpp)\n",
             trident::num_threads());
  for (DType dtype : {DType::f32, DType::bf16}) {
    bench_layer_norm(4096, 768, dtype);
    bench_layer_norm(256, 3072, dtype);
    bench_rms_norm(4096, 768, dtype);
    bench_rms_norm(256, 3072, dtype);
    bench_elementwise(256, 3072, dtype);
  }
  return 0;
}
