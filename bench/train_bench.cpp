// Training-step benchmark: GPT-2 124M, micro-batch 4, sequence 64 (the
// configuration of llm.c's CPU reference), forward + backward + AdamW.
//
// Prints ms/step, tokens/s, achieved GFLOP/s (6·N + 12·L·h·s FLOPs per token)
// and its ratio to the fp32 matmul peak measured in the same run, in fp32 and
// bf16, and the bf16/fp32 tokens/s ratio.
//
// On a GPU (--device cuda; llm.c's train_gpt2cu configuration is sequence
// 1024): tokens/s and MFU, the achieved FLOP/s over the GPU's dense bf16
// tensor-core peak (kernels::cuda::dense_peak_tflops; H100 SXM 989 TFLOP/s).
//
//   build/bin/train_bench [--steps N] [--batch B] [--seq T] [--preset gpt2] [--only f32|bf16]
//   build/bin/train_bench --device cuda --batch 8 --seq 1024 [--only bf16]
//   build/bin/train_bench --device cuda --preset llama-1b --batch 4 --seq 2048 --only bf16 --checkpointing 1
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "trident/autograd/autograd.h"
#include "trident/core/backend.h"
#include "trident/core/parallel.h"
#include "trident/kernels/cpu/matmul.h"
#include "trident/models/transformer_lm.h"
#include "trident/optim/optimizer.h"

#if TRIDENT_HAVE_CUDA
#include "trident/kernels/cuda/device.h"
#endif

using namespace trident;

namespace {

struct Result {
  double ms_per_step = 0;
  double tokens_per_s = 0;
  double gflops = 0;
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;  // medians of the parts
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Result run(const std::string& preset, DType compute, std::int64_t B, std::int64_t T, int steps,
           Device device = Device::cpu(), bool checkpointing = false) {
  models::TransformerLM model(models::preset(preset));
  model.initialize(1);
  model.set_activation_checkpointing(checkpointing);
  model.to(device);
  // Device work is asynchronous: wait for it before reading the clock.
  auto sync = [&] {
    if (device.is_cuda()) backend_for(device).synchronize(device.index);
  };
  optim::AdamW opt(model.parameters(), optim::AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  std::mt19937_64 gen(1);
  std::uniform_int_distribution<std::int64_t> tok(0, model.spec().vocab_size - 1);
  auto batch = [&] {
    Tensor t = Tensor::empty({B, T}, DType::i64);
    for (auto& x : t.span<std::int64_t>()) x = tok(gen);
    return t;
  };
  std::vector<double> times, fwd, bwd, upd;
  auto since = [](auto t) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(); };
  for (int s = 0; s < steps + 1; ++s) {  // the first step warms up (allocations, primitive creation)
    Tensor ids = batch().to(device), labels = batch().to(device);
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    nn::ForwardContext ctx;
    ctx.training = true;
    ctx.step = s + 1;
    ctx.compute_dtype = compute;
    autograd::Variable loss = model.loss(ids, labels, ctx);
    sync();
    const double t_fwd = since(t0);
    loss.backward();
    sync();
    const double t_bwd = since(t0) - t_fwd;
    opt.step(1e-4);
    sync();
    const double dt = since(t0);
    if (s > 0) {
      times.push_back(dt);
      fwd.push_back(t_fwd);
      bwd.push_back(t_bwd);
      upd.push_back(dt - t_fwd - t_bwd);
    }
  }
  const double med = median(times);
  Result r;
  r.forward_ms = 1e3 * median(fwd);
  r.backward_ms = 1e3 * median(bwd);
  r.optimizer_ms = 1e3 * median(upd);
  r.ms_per_step = med * 1e3;
  r.tokens_per_s = static_cast<double>(B * T) / med;
  r.gflops = model.flops_per_token(T) * r.tokens_per_s / 1e9;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5;
  std::int64_t B = 4, T = 64;
  std::string preset = "gpt2";
  std::string only;  // "f32" or "bf16": run one precision (for profiling)
  std::string device_name = "cpu";
  bool checkpointing = false;  // activation checkpointing: every block recomputed in backward
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--batch")) B = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seq")) T = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
    if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
    if (!std::strcmp(argv[i], "--device")) device_name = argv[i + 1];
    if (!std::strcmp(argv[i], "--checkpointing")) checkpointing = std::atoi(argv[i + 1]) != 0;
  }
  const Device device = parse_device(device_name);
  if (device.is_cuda()) {
#if TRIDENT_HAVE_CUDA
    if (!kernels::cuda::initialize()) {
      fmt::print("train_bench: no CUDA GPU here ({})\n", kernels::cuda::describe());
      return 1;
    }
    fmt::print("train_bench: {} ({:.3f}B parameters) B={} T={} steps={} activation checkpointing {} on {}\n", preset,
               static_cast<double>(models::preset(preset).num_parameters()) / 1e9, B, T, steps,
               checkpointing ? "on" : "off", kernels::cuda::describe());
    for (const DType dtype : {DType::bf16, DType::f32}) {
      if (!only.empty() && parse_dtype(only) != dtype) continue;
      const double peak = kernels::cuda::dense_peak_tflops(device.index, dtype != DType::f32);
      const Result r = run(preset, dtype, B, T, steps, device, checkpointing);
      fmt::print("{}: {:.1f} ms/step {:.0f} tokens/s {:.1f} TFLOP/s = MFU {:.1f}% of the {:.1f} TFLOP/s dense {} peak; "
                 "forward {:.1f} ms, backward {:.1f} ms, optimizer {:.1f} ms\n",
                 dtype_name(dtype), r.ms_per_step, r.tokens_per_s, r.gflops / 1e3, 100 * r.gflops / (peak * 1e3), peak,
                 dtype == DType::f32 ? "f32" : "bf16", r.forward_ms, r.backward_ms, r.optimizer_ms);
      const auto stats = kernels::cuda::allocator_stats(device.index);
      fmt::print("      GPU memory: peak reserved {:.2f} GiB, {} cudaMalloc calls in all\n",
                 static_cast<double>(stats.peak_reserved_bytes) / (1 << 30), stats.driver_allocations);
    }
    return 0;
#else
    (void)checkpointing;  // a GPU-only option
    fmt::print("train_bench: this build has no CUDA backend\n");
    return 1;
#endif
  }
  if (!only.empty()) {
    const DType dtype = parse_dtype(only);
    const Result r = run(preset, dtype, B, T, steps);
    fmt::print("{}: {:.1f} ms/step {:.1f} tokens/s; forward {:.1f} ms, backward {:.1f} ms, optimizer {:.1f} ms\n",
               dtype_name(dtype), r.ms_per_step, r.tokens_per_s, r.forward_ms, r.backward_ms, r.optimizer_ms);
    return 0;
  }
  fmt::print("train_bench: {} B={} T={} steps={} threads={}\n", preset, B, T, steps, num_threads());
  fmt::print("matmul: {}\n", kernels::cpu::matmul_backend_description());
  const double peak32 = kernels::cpu::measure_matmul_peak_gflops(DType::f32);
  const double peak16 = kernels::cpu::measure_matmul_peak_gflops(DType::bf16);
  fmt::print("measured matmul peak: fp32 {:.1f} GFLOP/s, bf16 {:.1f} GFLOP/s\n", peak32, peak16);
  const Result f32 = run(preset, DType::f32, B, T, steps);
  fmt::print("fp32: {:8.1f} ms/step {:8.1f} tokens/s {:7.1f} GFLOP/s = {:5.1f}% of the fp32 matmul peak\n",
             f32.ms_per_step, f32.tokens_per_s, f32.gflops, 100 * f32.gflops / peak32);
  fmt::print("      forward {:.1f} ms, backward {:.1f} ms, optimizer {:.1f} ms\n", f32.forward_ms, f32.backward_ms,
             f32.optimizer_ms);
  const Result b16 = run(preset, DType::bf16, B, T, steps);
  fmt::print("bf16: {:8.1f} ms/step {:8.1f} tokens/s {:7.1f} GFLOP/s = {:5.1f}% of the fp32 matmul peak, "
             "{:5.1f}% of the bf16 peak\n",
             b16.ms_per_step, b16.tokens_per_s, b16.gflops, 100 * b16.gflops / peak32, 100 * b16.gflops / peak16);
  fmt::print("      forward {:.1f} ms, backward {:.1f} ms, optimizer {:.1f} ms\n", b16.forward_ms, b16.backward_ms,
             b16.optimizer_ms);
  fmt::print("bf16 / fp32 tokens/s: {:.2f}x\n", b16.tokens_per_s / f32.tokens_per_s);
  return 0;
}
