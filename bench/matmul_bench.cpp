// Matmul throughput at GPT-2-small shapes (M×K×N = tokens × in × out) and at
// 2048³, in f32 through oneDNN and OpenBLAS and in bf16 through oneDNN.
// Prints GFLOP/s (median of repetitions after warm-up) and the two ratios
// measured in the same run:
//   f32 at 256×768×3072 / f32 at 2048³   (small-M efficiency; target ≥ 0.70)
//   bf16 / f32 at the same shape          (target ≥ 2.0)
// and the fp32 peak (2048³) that training benchmarks compare against.
//
// Then the per-call overhead at small shapes: trident's gemm (primitive cached
// by shape) against building the oneDNN primitive on every call, which leaves
// caching to oneDNN's own primitive cache.
//
//   matmul_bench [--min-reps N] [--seconds S] [--threads T] [--clock wall|cpu] [--layout nn|nt|tn|tt] [--peak]
//
// --clock cpu times with the process's CPU time instead of the wall clock:
// on a shared machine it measures what the library achieves per core it was
// actually given (meaningful with --threads 1, or with OMP_WAIT_POLICY=passive).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "trident/core/parallel.h"
#include "trident/core/tensor.h"
#include "trident/kernels/cpu/matmul.h"
#include "bench_clock.h"
#include <oneapi/dnnl/dnnl.hpp>

namespace {

using trident::DType;
using trident::Tensor;
namespace kc = trident::kernels::cpu;

struct Config {
  std::string name;
  DType ab, c;
  kc::MatmulBackend backend;
};

bool g_cpu_clock = false;
bool g_trans_a = false, g_trans_b = false;  // --layout: nn (default), nt (linear forward), tn (weight gradient)

double now_seconds() {
  return g_cpu_clock ? trident::bench::process_cpu_seconds() : trident::bench::wall_seconds();
}

struct Shape3 {
  std::int64_t m, k, n;
};

Tensor filled(std::int64_t rows, std::int64_t cols, DType dtype, int salt) {
  Tensor t = Tensor::empty({rows, cols}, DType::f32);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < rows * cols; ++i) p[i] = static_cast<float>((i * 7 + salt) % 23 - 11) * 0.01f;
  return t.to(dtype);
}

double median_gflops(const Shape3& s, const Config& cfg, int min_reps, double seconds) {
  Tensor a = filled(s.m, s.k, cfg.ab, 1), b = filled(s.k, s.n, cfg.ab, 2);
  Tensor c = Tensor::empty({s.m, s.n}, cfg.c);
  const kc::GemmShape shape{1, s.m, s.n, s.k, g_trans_a, g_trans_b};
  auto once = [&] {
    const double t0 = now_seconds();
    kc::gemm(cfg.ab, cfg.c, shape, 1.0, a.raw_data(), b.raw_data(), 0.0, c.raw_data(), cfg.backend);
    return now_seconds() - t0;
  };
  once();
  once();  // warm-up: primitive creation, page faults, thread start
  std::vector<double> gflops;
  const double start = now_seconds();
  while (static_cast<int>(gflops.size()) < min_reps || now_seconds() - start < seconds) {
    gflops.push_back(2.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n) / once() * 1e-9);
    if (gflops.size() >= 200) break;
  }
  std::sort(gflops.begin(), gflops.end());
  return gflops[gflops.size() / 2];
}

// Microseconds per f32 GEMM of m×k×n: through trident (primitive cached by
// shape) and with the primitive descriptor and primitive rebuilt every call.
std::pair<double, double> small_gemm_us(std::int64_t m, std::int64_t k, std::int64_t n) {
  Tensor a = filled(m, k, DType::f32, 3), b = filled(k, n, DType::f32, 4), c = Tensor::empty({m, n});
  const kc::GemmShape shape{1, m, n, k};
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  using dims = dnnl::memory::dims;
  const auto f32 = dnnl::memory::data_type::f32;
  const dnnl::memory::desc a_md(dims{m, k}, f32, dims{k, 1}), b_md(dims{k, n}, f32, dims{n, 1}),
      c_md(dims{m, n}, f32, dims{n, 1});
  auto rebuilt = [&] {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
    dnnl::matmul(pd).execute(stream, {{DNNL_ARG_SRC, dnnl::memory(a_md, engine, a.raw_data())},
                                      {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, engine, b.raw_data())},
                                      {DNNL_ARG_DST, dnnl::memory(c_md, engine, c.raw_data())}});
    stream.wait();
  };
  auto cached = [&] { kc::gemm(DType::f32, DType::f32, shape, 1.0, a.raw_data(), b.raw_data(), 0.0, c.raw_data(), kc::MatmulBackend::onednn); };
  auto time_us = [](auto&& f) {
    for (int i = 0; i < 20; ++i) f();
    std::vector<double> us;
    for (int rep = 0; rep < 7; ++rep) {
      const double t0 = now_seconds();
      for (int i = 0; i < 200; ++i) f();
      us.push_back((now_seconds() - t0) / 200 * 1e6);
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  return {time_us(cached), time_us(rebuilt)};
}

}  // namespace

int main(int argc, char** argv) {
  int min_reps = 5;
  double seconds = 1.0;
  bool peak_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--min-reps" && i + 1 < argc) {
      min_reps = std::atoi(argv[++i]);
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--threads" && i + 1 < argc) {
      trident::set_num_threads(std::atoi(argv[++i]));
    } else if (arg == "--clock" && i + 1 < argc) {
      g_cpu_clock = std::string(argv[++i]) == "cpu";
    } else if (arg == "--layout" && i + 1 < argc && std::strlen(argv[i + 1]) == 2) {
      g_trans_a = argv[++i][0] == 't';
      g_trans_b = argv[i][1] == 't';
    } else if (arg == "--peak") {
      peak_only = true;
    } else {
      fmt::print(stderr, "usage: matmul_bench [--min-reps N] [--seconds S] [--threads T] [--clock wall|cpu] [--layout nn|nt|tn|tt] [--peak]\n");
      return 2;
    }
  }
  fmt::print("matmul backend: {}\nthreads: {}, clock: {}, layout: op(A) {}, op(B) {}\n", kc::matmul_backend_description(),
             trident::num_threads(), g_cpu_clock ? "process cpu time" : "wall", g_trans_a ? "A^T" : "A",
             g_trans_b ? "B^T" : "B");
  if (peak_only) {
    for (DType d : {DType::f32, DType::bf16, DType::f64}) {
      fmt::print("measure_matmul_peak_gflops({}) = {:.1f}\n", trident::dtype_name(d), kc::measure_matmul_peak_gflops(d));
    }
    return 0;
  }

  const std::vector<Shape3> shapes = {{256, 768, 3072}, {256, 3072, 768}, {256, 768, 50304}, {2048, 2048, 2048}};
  const std::vector<Config> configs = {
      {"f32 onednn", DType::f32, DType::f32, kc::MatmulBackend::onednn},
      {"f32 openblas", DType::f32, DType::f32, kc::MatmulBackend::openblas},
      {"bf16 onednn", DType::bf16, DType::bf16, kc::MatmulBackend::onednn},
      {"bf16->f32 onednn", DType::bf16, DType::f32, kc::MatmulBackend::onednn},
  };
  std::vector<std::vector<double>> g(shapes.size(), std::vector<double>(configs.size()));
  fmt::print("{:>20}", "M x K x N");
  for (const auto& c : configs) fmt::print(" {:>17}", c.name);
  fmt::print("   (GFLOP/s, median)\n");
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    fmt::print("{:>20}", fmt::format("{} x {} x {}", shapes[i].m, shapes[i].k, shapes[i].n));
    for (std::size_t j = 0; j < configs.size(); ++j) {
      g[i][j] = median_gflops(shapes[i], configs[j], min_reps, seconds);
      fmt::print(" {:>17.1f}", g[i][j]);
      std::fflush(stdout);
    }
    fmt::print("\n");
  }
  const auto f32_default = kc::matmul_backend(DType::f32);
  const std::size_t f32 = f32_default == kc::MatmulBackend::onednn ? 0 : 1;
  const std::size_t peak_row = 3;
  fmt::print("\nf32 default backend: {}\n", kc::matmul_backend_name(f32_default));
  fmt::print("fp32 peak (2048^3, {}): {:.1f} GFLOP/s\n", configs[f32].name, g[peak_row][f32]);
  fmt::print("ratio f32 256x768x3072 / f32 2048^3: {:.2f} (target >= 0.70; onednn {:.2f}, openblas {:.2f})\n",
             g[0][f32] / g[peak_row][f32], g[0][0] / g[peak_row][0], g[0][1] / g[peak_row][1]);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    fmt::print("ratio bf16 / f32 at {} x {} x {}: {:.2f} (target >= 2.0; bf16->f32 out {:.2f})\n", shapes[i].m,
               shapes[i].k, shapes[i].n, g[i][2] / g[i][f32], g[i][3] / g[i][f32]);
  }
  fmt::print("\nper-call overhead, f32 oneDNN (microseconds, median):\n");
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{8, 8, 8}, {32, 64, 32}, {64, 768, 64}}) {
    auto [cached, rebuilt] = small_gemm_us(m, k, n);
    fmt::print("  {:>3} x {:>3} x {:>3}: trident cache {:7.2f} us, primitive rebuilt per call {:7.2f} us\n", m, k, n, cached,
               rebuilt);
  }
  return 0;
}
