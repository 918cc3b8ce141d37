// The backend-consistency cases, by op family (see cuda_consistency_test.cpp for
// how they are compared). Shapes are odd on purpose (37 × 1000/1001, widths just
// past a warp's 1024), with misaligned views and one GPT-2-sized case per family.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "cuda_consistency.h"
#include "trident/core/dtype.h"
#include "trident/core/rng.h"
#include "trident/ops/activation.h"
#include "trident/ops/attention.h"
#include "trident/ops/dropout.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/embedding.h"
#include "trident/ops/loss.h"
#include "trident/ops/matmul.h"
#include "trident/ops/norm.h"
#include "trident/ops/optimizer.h"
#include "trident/ops/reduce.h"
#include "trident/ops/registry.h"
#include "trident/ops/rope.h"
#include "trident/ops/shape.h"
#include "trident/ops/softmax.h"

namespace trident::consistency {

Tensor uniform(Rng& gen, const Shape& shape, DType dtype, double lo, double hi) {
  Tensor t = Tensor::empty(shape, DType::f64);
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int> integer(0, 99);
  for (double& v : t.span<double>()) v = is_floating(dtype) ? real(gen) : integer(gen);
  return t.to(dtype);
}

namespace {

Tensor random_ids(Rng& gen, const Shape& shape, std::int64_t bound_excl, DType dtype = DType::i64) {
  std::uniform_int_distribution<std::int64_t> dist(0, bound_excl - 1);
  Tensor t = Tensor::empty(shape, DType::i64);
  for (auto& v : t.span<std::int64_t>()) v = dist(gen);
  return t.to(dtype);
}

// Targets in [0, vocab) with every 7th row ignore_index (-100).
Tensor targets_with_ignored(Rng& gen, const Shape& shape, std::int64_t vocab, DType dtype = DType::i64) {
  Tensor t = random_ids(gen, shape, vocab);
  auto s = t.span<std::int64_t>();
  for (std::size_t i = 3; i < s.size(); i += 7) s[i] = -100;
  return t.to(dtype);
}

DType loss_dtype(DType logits) {
  return logits == DType::f64 ? DType::f64 : DType::f32;
}

MakeInputs uniform_in(double lo, double hi) {
  return [lo, hi](Rng& gen, DType dtype, const Shapes& shapes) {
    Tensors in;
    for (const Shape& s : shapes) in.push_back(uniform(gen, s, dtype, lo, hi));
    return in;
  };
}

// All but the first element of a 1-D input: a view whose data starts one element past its allocation's start.
Tensor misaligned(const Tensor& flat) {
  return flat.slice0(1, flat.size(0));
}

const std::vector<DType> kFloat = {DType::f32, DType::bf16, DType::f16, DType::f64};
const std::vector<DType> kNoF64 = {DType::f32, DType::bf16, DType::f16};
const std::vector<DType> kRealistic = {DType::f32, DType::bf16};  // the realistic shapes: training dtypes only
const std::vector<DType> kF32 = {DType::f32};
const std::vector<DType> kMaster = {DType::f32, DType::f64};
const std::vector<DType> kAnyDType = {DType::f32, DType::bf16, DType::f64, DType::i64, DType::u8};

struct CaseTable {
  std::vector<ConsistencyCase> cases;
  void add(const std::string& name, Op op, const std::vector<DType>& dtypes, const Shapes& shapes, const RunOp& run,
           const MakeInputs& make = uniform_in(-1, 1), double error_floor = 0) {
    for (DType d : dtypes)
      cases.push_back({name + "_" + std::string(dtype_name(d)), op, d, shapes, make, run, error_floor});
  }
};

// --- the cases, by family ---

void elementwise_cases(CaseTable& t) {
  const Shapes odd = {{37, 1001}, {37, 1001}}, gpt2 = {{8 * 64, 768}, {8 * 64, 768}};
  const RunOp add = [](const Tensors& in, Device) { return Tensors{ops::add(in[0], in[1])}; };
  t.add("add", Op::add, kFloat, odd, add);
  t.add("add_gpt2", Op::add, kRealistic, gpt2, add);
  t.add("add_misaligned", Op::add, kNoF64, {{1 + 37 * 1001}, {1 + 37 * 1001}},
        [](const Tensors& in, Device) { return Tensors{ops::add(misaligned(in[0]), misaligned(in[1]))}; });
  t.add("add_inplace", Op::add, kFloat, odd, [](const Tensors& in, Device) {
    Tensor dst = in[0];
    ops::add_(dst, in[1], 0.3);
    return Tensors{dst};
  });
  t.add("add_inplace_misaligned", Op::add, kNoF64, {{1 + 4099}, {1 + 4099}}, [](const Tensors& in, Device) {
    Tensor dst = misaligned(in[0]);
    ops::add_(dst, misaligned(in[1]), -1.5);
    return Tensors{dst};
  });
  t.add("sub", Op::sub, kFloat, odd, [](const Tensors& in, Device) { return Tensors{ops::sub(in[0], in[1])}; });
  t.add("mul", Op::mul, kFloat, odd, [](const Tensors& in, Device) { return Tensors{ops::mul(in[0], in[1])}; });
  t.add("scale", Op::scale, kFloat, {{37, 1001}},
        [](const Tensors& in, Device) { return Tensors{ops::scale(in[0], -1.7)}; });
  t.add("scale_inplace", Op::scale, kFloat, {{37, 1001}}, [](const Tensors& in, Device) {
    Tensor dst = in[0];
    ops::scale_(dst, 0.125);
    return Tensors{dst};
  });
  const RunOp bias_add = [](const Tensors& in, Device) { return Tensors{ops::bias_add(in[0], in[1])}; };
  t.add("bias_add", Op::bias_add, kFloat, {{37, 1001}, {1001}}, bias_add);
  t.add("bias_add_gpt2", Op::bias_add, kRealistic, {{8, 64, 2304}, {2304}}, bias_add);
  // cast_to_<target>_<source>; values up to ±100 so that rounding is exercised at several exponents.
  const auto cast = [&t](DType target, const std::vector<DType>& sources) {
    t.add(
        fmt::format("cast_to_{}", dtype_name(target)), Op::cast, sources, {{37, 1001}},
        [target](const Tensors& in, Device) { return Tensors{ops::cast(in[0], target)}; }, uniform_in(-100, 100));
  };
  cast(DType::bf16, {DType::f32, DType::f16, DType::f64});
  cast(DType::f16, {DType::f32, DType::bf16, DType::f64});
  cast(DType::f32, {DType::bf16, DType::f16, DType::f64});
  cast(DType::f64, {DType::f32, DType::bf16});
}

void reduce_cases(CaseTable& t) {
  // Mostly positive values: a sum that cancels to near zero would measure its condition number, not the kernel.
  const MakeInputs positive = uniform_in(-0.5, 1.5);
  const RunOp sum = [](const Tensors& in, Device) { return Tensors{ops::sum(in[0])}; };
  const RunOp mean = [](const Tensors& in, Device) { return Tensors{ops::mean(in[0])}; };
  const RunOp to_last = [](const Tensors& in, Device) { return Tensors{ops::sum_to_last_dim(in[0])}; };
  t.add("sum", Op::sum, kFloat, {{37, 1001}}, sum, positive);
  t.add("sum_gpt2", Op::sum, kRealistic, {{8 * 64, 768}}, sum, positive);
  t.add("sum_one_element", Op::sum, kFloat, {{1}}, sum, positive);
  t.add("sum_to_last_dim", Op::sum, kFloat, {{37, 1001}}, to_last, positive);
  t.add("sum_to_last_dim_gpt2", Op::sum, kRealistic, {{8, 64, 768}}, to_last, positive);
  t.add("mean", Op::mean, kFloat, {{37, 1001}}, mean, positive);
  t.add("mean_gpt2", Op::mean, kRealistic, {{8 * 64, 768}}, mean, positive);
}

void activation_cases(CaseTable& t) {
  const MakeInputs wide = uniform_in(-5, 5);  // both tails of every activation
  const Shapes odd = {{37, 1001}, {37, 1001}}, mlp = {{8 * 64, 3072}, {8 * 64, 3072}};
  const auto unary = [&](const std::string& name, Op op, Tensor (*fwd)(const Tensor&),
                         Tensor (*bwd)(const Tensor&, const Tensor&)) {
    const RunOp f = [fwd](const Tensors& in, Device) { return Tensors{fwd(in[0])}; };
    const RunOp b = [bwd](const Tensors& in, Device) { return Tensors{bwd(in[0], in[1])}; };  // (dy, x)
    t.add(name, op, kFloat, {odd[0]}, f, wide);
    t.add(name + "_gpt2", op, kRealistic, {mlp[0]}, f, wide);
    t.add(name + "_backward", op, kFloat, odd, b, wide);
    t.add(name + "_backward_gpt2", op, kRealistic, mlp, b, wide);
  };
  unary("gelu_tanh", Op::gelu_tanh, &ops::gelu_tanh, &ops::gelu_tanh_backward);
  unary("gelu", Op::gelu, &ops::gelu, &ops::gelu_backward);
  unary("silu", Op::silu, &ops::silu, &ops::silu_backward);
  // tanh: the backward's second input is the forward's output, in (-1, 1).
  const RunOp tanh_f = [](const Tensors& in, Device) { return Tensors{ops::tanh(in[0])}; };
  const RunOp tanh_b = [](const Tensors& in, Device) { return Tensors{ops::tanh_backward(in[0], in[1])}; };  // (dy, y)
  t.add("tanh", Op::tanh, kFloat, {odd[0]}, tanh_f, wide);
  t.add("tanh_bert", Op::tanh, kRealistic, {{32, 768}}, tanh_f, wide);
  t.add("tanh_backward", Op::tanh, kFloat, odd, tanh_b, uniform_in(-1, 1));
  t.add("tanh_backward_bert", Op::tanh, kRealistic, {{32, 768}, {32, 768}}, tanh_b, uniform_in(-1, 1));

  const RunOp swiglu = [](const Tensors& in, Device) { return Tensors{ops::swiglu(in[0], in[1])}; };
  const RunOp swiglu_bwd = [](const Tensors& in, Device) {
    auto g = ops::swiglu_backward(in[0], in[1], in[2]);
    return Tensors{g.dgate, g.dup};
  };
  t.add("swiglu", Op::swiglu, kFloat, odd, swiglu, wide);
  t.add("swiglu_llama", Op::swiglu, kRealistic, {{4, 64, 2752}, {4, 64, 2752}}, swiglu, wide);
  t.add("swiglu_backward", Op::swiglu, kFloat, {odd[0], odd[0], odd[0]}, swiglu_bwd, wide);
  t.add("swiglu_backward_llama", Op::swiglu, kRealistic, {{4, 64, 2752}, {4, 64, 2752}, {4, 64, 2752}}, swiglu_bwd,
        wide);

  const RunOp bias_gelu = [](const Tensors& in, Device) { return Tensors{ops::bias_gelu_tanh(in[0], in[1])}; };
  const RunOp bias_gelu_bwd = [](const Tensors& in, Device) {
    auto g = ops::bias_gelu_tanh_backward(in[0], in[1], in[2]);
    return Tensors{g.dx, g.dbias};
  };
  t.add("bias_gelu_tanh", Op::bias_gelu_tanh, kFloat, {{37, 1000}, {1000}}, bias_gelu, wide);
  t.add("bias_gelu_tanh_gpt2", Op::bias_gelu_tanh, kRealistic, {{8, 64, 3072}, {3072}}, bias_gelu, wide);
  t.add("bias_gelu_tanh_backward", Op::bias_gelu_tanh, kFloat, {{37, 1000}, {37, 1000}, {1000}}, bias_gelu_bwd, wide);
  t.add("bias_gelu_tanh_backward_gpt2", Op::bias_gelu_tanh, kRealistic, {{8, 64, 3072}, {8, 64, 3072}, {3072}},
        bias_gelu_bwd, wide);
}

void norm_cases(CaseTable& t) {
  // shapes: {x, [C]}; x away from zero mean so that the centring matters.
  const auto layer_norm_inputs = [](bool bias, bool backward) -> MakeInputs {
    return [=](Rng& gen, DType d, const Shapes& s) {
      Tensor x = uniform(gen, s[0], d, -1.5, 2.5), w = uniform(gen, s[1], d, 0.5, 1.5);
      Tensor b = bias ? uniform(gen, s[1], d) : Tensor();
      if (!backward) return Tensors{x, w, b};
      auto f = ops::layer_norm(x, w, b);
      return Tensors{uniform(gen, s[0], d), x, w, f.mean, f.rstd};
    };
  };
  const RunOp ln = [](const Tensors& in, Device) {
    auto f = ops::layer_norm(in[0], in[1], in[2]);
    return Tensors{f.y, f.mean, f.rstd};
  };
  const RunOp ln_bwd = [](const Tensors& in, Device) {
    auto g = ops::layer_norm_backward(in[0], in[1], in[2], in[3], in[4]);
    return Tensors{g.dx, g.dweight, g.dbias};
  };
  for (const bool bwd : {false, true}) {
    const std::string suffix = bwd ? "_backward" : "";
    const RunOp& run = bwd ? ln_bwd : ln;
    t.add("layer_norm" + suffix, Op::layer_norm, kFloat, {{37, 1000}, {1000}}, run, layer_norm_inputs(true, bwd));
    t.add("layer_norm" + suffix + "_no_bias", Op::layer_norm, kRealistic, {{37, 1000}, {1000}}, run,
          layer_norm_inputs(false, bwd));
    t.add("layer_norm" + suffix + "_odd_width", Op::layer_norm, kNoF64, {{3, 5, 4099}, {4099}}, run,
          layer_norm_inputs(true, bwd));
    t.add("layer_norm" + suffix + "_narrow", Op::layer_norm, kF32, {{37, 24}, {24}}, run, layer_norm_inputs(true, bwd));
    t.add("layer_norm" + suffix + "_gpt2", Op::layer_norm, kRealistic, {{8, 64, 768}, {768}}, run,
          layer_norm_inputs(true, bwd));
    // A power-of-two width and one past it (vectorised rows, then a scalar tail): the sanitizer's cases.
    t.add("layer_norm" + suffix + "_1024", Op::layer_norm, kNoF64, {{33, 1024}, {1024}}, run,
          layer_norm_inputs(true, bwd));
    t.add("layer_norm" + suffix + "_1025", Op::layer_norm, kNoF64, {{33, 1025}, {1025}}, run,
          layer_norm_inputs(true, bwd));
  }

  const auto rms_norm_inputs = [](bool backward) -> MakeInputs {
    return [=](Rng& gen, DType d, const Shapes& s) {
      Tensor x = uniform(gen, s[0], d, -1.5, 2.5), w = uniform(gen, s[1], d, 0.5, 1.5);
      if (!backward) return Tensors{x, w};
      return Tensors{uniform(gen, s[0], d), x, w, ops::rms_norm(x, w).rstd};
    };
  };
  const RunOp rms = [](const Tensors& in, Device) {
    auto f = ops::rms_norm(in[0], in[1]);
    return Tensors{f.y, f.rstd};
  };
  const RunOp rms_bwd = [](const Tensors& in, Device) {
    auto g = ops::rms_norm_backward(in[0], in[1], in[2], in[3]);
    return Tensors{g.dx, g.dweight};
  };
  for (const bool bwd : {false, true}) {
    const std::string suffix = bwd ? "_backward" : "";
    const RunOp& run = bwd ? rms_bwd : rms;
    t.add("rms_norm" + suffix, Op::rms_norm, kFloat, {{37, 1000}, {1000}}, run, rms_norm_inputs(bwd));
    t.add("rms_norm" + suffix + "_odd_width", Op::rms_norm, kNoF64, {{3, 5, 4099}, {4099}}, run, rms_norm_inputs(bwd));
    t.add("rms_norm" + suffix + "_llama", Op::rms_norm, kRealistic, {{4, 64, 4096}, {4096}}, run, rms_norm_inputs(bwd));
    t.add("rms_norm" + suffix + "_1024", Op::rms_norm, kNoF64, {{33, 1024}, {1024}}, run, rms_norm_inputs(bwd));
    t.add("rms_norm" + suffix + "_1025", Op::rms_norm, kNoF64, {{33, 1025}, {1025}}, run, rms_norm_inputs(bwd));
  }
}

void softmax_cases(CaseTable& t) {
  // shapes: {x}; scores of up to ±8, with -inf entries (masked keys) and row 1 entirely -inf (zeros expected).
  const auto inputs = [](bool backward) -> MakeInputs {
    return [=](Rng& gen, DType d, const Shapes& s) {
      Tensor x = uniform(gen, s[0], DType::f64, -8, 8);
      auto v = x.span<double>();
      const std::int64_t cols = s[0].last();
      for (std::size_t i = 0; i < v.size(); i += 5) v[i] = -std::numeric_limits<double>::infinity();
      if (x.numel() / cols > 1)
        std::fill(v.begin() + cols, v.begin() + 2 * cols, -std::numeric_limits<double>::infinity());
      x = x.to(d);
      if (!backward) return Tensors{x};
      return Tensors{ops::softmax(x), uniform(gen, s[0], d)};
    };
  };
  const RunOp fwd = [](const Tensors& in, Device) { return Tensors{ops::softmax(in[0])}; };
  const RunOp bwd = [](const Tensors& in, Device) { return Tensors{ops::softmax_backward(in[0], in[1])}; };
  t.add("softmax", Op::softmax, kFloat, {{37, 1000}}, fwd, inputs(false));
  t.add("softmax_odd_width", Op::softmax, kNoF64, {{3, 5, 4099}}, fwd, inputs(false));
  t.add("softmax_width_1025", Op::softmax, kRealistic, {{37, 1025}}, fwd, inputs(false));  // just past one warp a row
  t.add("softmax_gpt2_scores", Op::softmax, kRealistic, {{8 * 12, 64, 64}}, fwd, inputs(false));
  t.add("softmax_backward", Op::softmax, kFloat, {{37, 1000}}, bwd, inputs(true));
  t.add("softmax_backward_odd_width", Op::softmax, kNoF64, {{3, 5, 4099}}, bwd, inputs(true));
  t.add("softmax_backward_width_1025", Op::softmax, kRealistic, {{37, 1025}}, bwd, inputs(true));
  t.add("softmax_backward_gpt2_scores", Op::softmax, kRealistic, {{8 * 12, 64, 64}}, bwd, inputs(true));
}

// A key-padding mask [B, S] (1 real, 0 padding) in `dtype`; sample b % 4 = 0 has no padding, 1 its last third
// padded, 2 a run of S/2 keys from S/4 (a whole 64-key tile at S ≥ 192), 3 every key (zero output, lse −inf).
Tensor padded_keys(std::int64_t B, std::int64_t S, DType dtype) {
  Tensor m = Tensor::empty({B, S}, DType::i64);
  auto x = m.span<std::int64_t>();
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t s = 0; s < S; ++s) {
      const std::int64_t kind = b % 4;
      const bool pad = (kind == 1 && s >= S - std::max<std::int64_t>(3, S / 3)) ||
                       (kind == 2 && s >= S / 4 && s < S / 4 + std::max<std::int64_t>(2, S / 2)) || kind == 3;
      x[static_cast<std::size_t>(b * S + s)] = pad ? 0 : 1;
    }
  }
  return m.to(dtype);
}

// Attention: shapes {q [B, T, H, D], k/v [B, S, Hkv, D]}; with a mask, it is [T, S] with -inf entries and its
// first query row entirely hidden (zero output, lse −inf); with a key mask, padded_keys in key_mask_dtype;
// with dropout on the probabilities, the call placed at sample 3 and head 1 of H + 2 heads (the mask is
// drawn at those global coordinates, the same bits on both backends). The backward gets out and lse from
// the CPU forward.
void attention_cases(CaseTable& t) {
  struct Config {
    std::string name;
    Shape q, kv;
    bool causal = true;
    double scale = 0;
    bool mask = false;
    std::vector<DType> dtypes = kFloat;
    std::int64_t window = 0;  // sliding window (causal only)
    DType key_mask = DType::f32;  // a key-padding mask (padded_keys) of this dtype; f32: none
    double dropout = 0;           // on the probabilities; 0: none
    bool documents = false;       // packed documents: one every 23 positions (chunk_document_starts)
    // q and k as chunks of a sequence of seq_len at positions q_pos and k_pos (−1: bottom-right alignment);
    // the dropout then draws on the sequence's grid.
    std::int64_t q_pos = -1, k_pos = -1, seq_len = 0;
  };
  // Document starts [B, T] of documents opening every 23 positions, for queries from position q0.
  const auto chunk_document_starts = [](std::int64_t B, std::int64_t T, std::int64_t q0) {
    std::vector<std::int32_t> starts;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < T; ++i) starts.push_back(static_cast<std::int32_t>((q0 + i) - (q0 + i) % 23));
    return Tensor::from_vector<std::int32_t>(starts, {B, T});
  };
  const std::vector<Config> configs = {
      {"causal", {2, 37, 4, 64}, {2, 37, 4, 64}},
      {"not_causal", {2, 37, 4, 64}, {2, 53, 4, 64}, false},
      {"gqa", {2, 37, 8, 64}, {2, 37, 2, 64}},
      {"gqa_head_dim_128", {1, 67, 8, 128}, {1, 67, 2, 128}, true, 0, false, kNoF64},
      {"kv_cache", {2, 5, 4, 64}, {2, 41, 4, 64}},
      {"mask_and_scale", {2, 37, 4, 32}, {2, 45, 4, 32}, false, 0.3, true},
      {"causal_mask", {1, 37, 4, 32}, {1, 37, 4, 32}, true, 0, true, kF32},
      {"head_dim_16", {3, 29, 2, 16}, {3, 29, 2, 16}, true, 0, false, kF32},
      {"gpt2", {4, 256, 12, 64}, {4, 256, 12, 64}, true, 0, false, kRealistic},
      // Tensor-core paths with padded head-dim lanes (40 → 64: 16-byte copies; 20 → 32: scalar copies),
      // more queries than keys under the causal alignment, and several partial query tiles.
      {"head_dim_40", {2, 45, 4, 40}, {2, 45, 4, 40}, true, 0, false, {DType::f32, DType::bf16, DType::f16}},
      {"head_dim_20", {2, 45, 4, 20}, {2, 45, 4, 20}, true, 0, false, {DType::f32, DType::bf16, DType::f16}},
      {"more_queries_than_keys", {2, 70, 4, 64}, {2, 33, 4, 64}, true, 0, false, kRealistic},
      {"partial_tiles", {1, 130, 4, 64}, {1, 130, 4, 64}},
      // Whole 64 × 64 tiles without the causal rule (no per-element test), GQA at head_dim 128.
      {"not_causal_whole_tiles_gqa_128", {2, 128, 8, 128}, {2, 192, 2, 128}, false, 0, false, kRealistic},
      // Sliding windows: ends inside a tile (skipped tiles on both sides), window 1, one tile, with a KV cache,
      // GQA with a mask, head_dim 128, and a window past every key (same as full causal).
      {"window_70", {2, 200, 4, 64}, {2, 200, 4, 64}, true, 0, false, kFloat, 70},
      {"window_1", {1, 130, 4, 64}, {1, 130, 4, 64}, true, 0, false, kFloat, 1},
      {"window_64_head_dim_40", {2, 150, 4, 40}, {2, 150, 4, 40}, true, 0, false, kNoF64, 64},
      {"window_kv_cache", {2, 5, 4, 64}, {2, 300, 4, 64}, true, 0, false, kFloat, 100},
      {"window_kv_cache_prefill", {1, 70, 4, 64}, {1, 260, 4, 64}, true, 0, false, kFloat, 90},
      {"window_gqa_mask", {1, 150, 8, 32}, {1, 150, 2, 32}, true, 0, true, kNoF64, 50},
      {"window_gqa_head_dim_128", {1, 200, 8, 128}, {1, 200, 2, 128}, true, 0, false, kRealistic, 96},
      {"window_past_keys", {2, 37, 4, 64}, {2, 37, 4, 64}, true, 0, false, kNoF64, 1000},
      // Key padding (BERT's attention_mask): four samples padded differently, one of them entirely; not
      // causal (BERT) and causal, a KV cache, padding-only key tiles, a window with GQA and an additive mask,
      // head_dim 40 (padded lanes) and each key-mask dtype.
      {"key_mask_not_causal", {4, 37, 4, 64}, {4, 53, 4, 64}, false, 0, false, kFloat, 0, DType::i64},
      {"key_mask_causal", {4, 130, 4, 64}, {4, 130, 4, 64}, true, 0, false, kFloat, 0, DType::i32},
      {"key_mask_kv_cache", {4, 5, 4, 64}, {4, 141, 4, 64}, true, 0, false, kFloat, 0, DType::u8},
      {"key_mask_bert_long", {4, 200, 4, 64}, {4, 200, 4, 64}, false, 0, false, kRealistic, 0, DType::i64},
      {"key_mask_head_dim_40_scale", {4, 70, 4, 40}, {4, 70, 4, 40}, false, 0.2, false, kNoF64, 0, DType::u8},
      {"key_mask_window_gqa_mask", {4, 150, 8, 32}, {4, 150, 2, 32}, true, 0, true, kNoF64, 50, DType::i64},
      // Dropout on the probabilities: causal; BERT (not causal, key padding, whole tiles); GQA at head_dim 128
      // with a window; head_dim 40 with a mask and a scale; a KV cache; p = 0.5.
      {"dropout_causal", {2, 37, 4, 64}, {2, 37, 4, 64}, true, 0, false, kFloat, 0, DType::f32, 0.1},
      {"dropout_bert_key_mask", {4, 200, 4, 64}, {4, 200, 4, 64}, false, 0, false, kFloat, 0, DType::i64, 0.1},
      {"dropout_bert_whole_tiles", {2, 128, 4, 64}, {2, 128, 4, 64}, false, 0, false, kRealistic, 0, DType::f32, 0.1},
      {"dropout_window_gqa_head_dim_128", {1, 200, 8, 128}, {1, 200, 2, 128}, true, 0, false, kRealistic, 96,
       DType::f32, 0.2},
      {"dropout_head_dim_40_mask_scale", {2, 45, 4, 40}, {2, 53, 4, 40}, false, 0.3, true, kNoF64, 0, DType::u8, 0.3},
      {"dropout_kv_cache_half", {2, 5, 4, 64}, {2, 41, 4, 64}, true, 0, false, kFloat, 0, DType::f32, 0.5},
      // Packed documents (a document every 23 positions: several per 64-key tile); with a window and GQA.
      {"documents", {2, 130, 4, 64}, {2, 130, 4, 64}, true, 0, false, kFloat, 0, DType::f32, 0, true},
      {"documents_window_gqa", {2, 150, 8, 32}, {2, 150, 2, 32}, true, 0, false, kNoF64, 50, DType::f32, 0, true},
      // Chunk pairs of context parallelism: the diagonal pair, a wholly visible pair with GQA, and a pair with a
      // window, documents begun before the chunks and dropout on the whole sequence's grid.
      {"chunk_diagonal", {2, 37, 4, 64}, {2, 37, 4, 64}, true, 0, false, kFloat, 0, DType::f32, 0, false, 37, 37, 148},
      {"chunk_full_gqa", {2, 37, 8, 64}, {2, 37, 2, 64}, true, 0, false, kFloat, 0, DType::f32, 0, false, 111, 0, 148},
      {"chunk_window_documents_dropout", {2, 70, 4, 64}, {2, 70, 4, 64}, true, 0, false, kNoF64, 50, DType::f32, 0.1,
       true, 140, 100, 280},
  };
  for (const Config& cfg : configs) {
    ops::AttentionOptions options;
    options.causal = cfg.causal;
    options.scale = cfg.scale;
    options.window = cfg.window;
    if (cfg.dropout > 0) {
      options.dropout = {cfg.dropout, CounterRng(99, "consistency/attention"), 3, 1, cfg.q[2] + 2, cfg.seq_len};
    }
    options.query_position = cfg.q_pos;
    options.key_position = cfg.k_pos;
    const bool with_mask = cfg.mask;
    const DType key_mask_dtype = cfg.key_mask;
    const Tensor documents =
        cfg.documents ? chunk_document_starts(cfg.q[0], cfg.q[1], std::max<std::int64_t>(cfg.q_pos, 0)) : Tensor();
    const auto inputs = [options, with_mask, key_mask_dtype, documents](bool backward) -> MakeInputs {
      return [=](Rng& gen, DType d, const Shapes& s) {
        Tensor q = uniform(gen, s[0], d, -2, 2), k = uniform(gen, s[1], d, -2, 2), v = uniform(gen, s[1], d);
        ops::AttentionOptions opts = options;
        if (with_mask) {
          Tensor m = uniform(gen, {s[0][1], s[1][1]}, DType::f64);
          auto mv = m.span<double>();
          const auto keys = static_cast<std::size_t>(s[1][1]);
          for (std::size_t i = 0; i < mv.size(); ++i) {
            if (i < keys || i % 4 == 1) mv[i] = -std::numeric_limits<double>::infinity();
          }
          opts.mask = m.to(d);
        }
        if (key_mask_dtype != DType::f32) opts.key_mask = padded_keys(s[0][0], s[1][1], key_mask_dtype);
        opts.document_starts = documents;
        if (!backward) return Tensors{q, k, v, opts.mask, opts.key_mask, documents};
        auto [out, lse] = ops::attention(q, k, v, opts);
        return Tensors{q, k, v, out, lse, uniform(gen, s[0], d), opts.mask, opts.key_mask, documents};
      };
    };
    const RunOp fwd = [options](const Tensors& in, Device) {
      ops::AttentionOptions opts = options;
      opts.mask = in[3];
      opts.key_mask = in[4];
      opts.document_starts = in[5];
      auto [out, lse] = ops::attention(in[0], in[1], in[2], opts);
      return Tensors{out, lse};
    };
    const RunOp bwd = [options](const Tensors& in, Device) {
      ops::AttentionOptions opts = options;
      opts.mask = in[6];
      opts.key_mask = in[7];
      opts.document_starts = in[8];
      auto [dq, dk, dv] = ops::attention_backward(in[0], in[1], in[2], in[3], in[4], in[5], opts);
      return Tensors{dq, dk, dv};
    };
    t.add("attention_" + cfg.name, Op::attention, cfg.dtypes, {cfg.q, cfg.kv}, fwd, inputs(false));
    // With window 1 every query sees one key: P = 1, dS = P·(dP − Di) = 0, so dQ and dK are zero in exact
    // arithmetic and both backends return rounding noise; their error is measured against dO's scale (1).
    t.add("attention_backward_" + cfg.name, Op::attention, cfg.dtypes, {cfg.q, cfg.kv}, bwd, inputs(true),
          cfg.window == 1 ? 1.0 : 0.0);
  }
}

// Block-sparse attention (AttentionOptions::block_layout): shapes {q [B, T, H, D], k/v [B, T, Hkv, D]}; a
// random layout per head over blocks of 16 (diagonal set), causal and not, GQA, key padding, dropout.
void sparse_attention_cases(CaseTable& t) {
  struct Sparse {
    std::string name;
    bool causal;
    bool key_padding;
    double dropout;
  };
  for (const Sparse& c : {Sparse{"causal", true, false, 0.0}, Sparse{"bidirectional_padded", false, true, 0.0},
                          Sparse{"causal_dropout", true, false, 0.2}}) {
    const auto options = [c](const Tensors& in) {
      ops::AttentionOptions o;
      o.causal = c.causal;
      o.block_layout = in[3];
      o.block = 16;
      o.layout_head_offset = 1;
      if (c.key_padding) o.key_mask = in[4];
      if (c.dropout > 0) o.dropout = {c.dropout, CounterRng(5, "consistency/sparse"), 0, 1, 6};
      return o;
    };
    const auto inputs = [c, options](bool backward) -> MakeInputs {
      return [=](Rng& gen, DType d, const Shapes& s) {
        const std::int64_t B = s[0][0], T = s[0][1], nb = (T + 15) / 16;
        Tensor layout = random_ids(gen, {6, nb, nb}, 2, DType::u8);
        for (std::int64_t h = 0; h < 6; ++h)
          for (std::int64_t r = 0; r < nb; ++r) layout.data<std::uint8_t>()[(h * nb + r) * nb + r] = 1;
        Tensors in{uniform(gen, s[0], d, -2, 2), uniform(gen, s[1], d, -2, 2), uniform(gen, s[1], d), layout,
                   padded_keys(B, T, DType::u8)};
        if (!backward) return in;
        auto [out, lse] = ops::attention(in[0], in[1], in[2], options(in));
        in.push_back(out);
        in.push_back(lse);
        in.push_back(uniform(gen, s[0], d));
        return in;
      };
    };
    const RunOp fwd = [options](const Tensors& in, Device) {
      auto [out, lse] = ops::attention(in[0], in[1], in[2], options(in));
      return Tensors{out, lse};
    };
    const RunOp bwd = [options](const Tensors& in, Device) {
      auto [dq, dk, dv] = ops::attention_backward(in[0], in[1], in[2], in[5], in[6], in[7], options(in));
      return Tensors{dq, dk, dv};
    };
    const Shapes shapes = {{4, 100, 4, 40}, {4, 100, 2, 40}};
    t.add("attention_sparse_" + c.name, Op::attention, kFloat, shapes, fwd, inputs(false));
    t.add("attention_backward_sparse_" + c.name, Op::attention, kFloat, shapes, bwd, inputs(true));
  }
}

// attention_merge: shapes {accumulators [B, T, H, D], part [B, P, H, D]}, the part at row 3; accumulators in
// the acc dtype, every 3rd lse and every 2nd part_lse −inf (rows seeing no key yet, parts seeing none).
void attention_merge_cases(CaseTable& t) {
  const MakeInputs inputs = [](Rng& gen, DType d, const Shapes& s) {
    const DType acc = loss_dtype(d);
    const std::int64_t B = s[0][0], T = s[0][1], H = s[0][2], P = s[1][1];
    Tensor lse = uniform(gen, {B, H, T}, DType::f64, -2, 3), part_lse = uniform(gen, {B, H, P}, DType::f64, -2, 3);
    auto l = lse.span<double>();
    auto pl = part_lse.span<double>();
    for (std::size_t i = 0; i < l.size(); i += 3) l[i] = -std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < pl.size(); i += 2) pl[i] = -std::numeric_limits<double>::infinity();
    return Tensors{uniform(gen, s[0], acc), lse.to(acc), uniform(gen, s[1], d), part_lse.to(acc)};
  };
  const RunOp run = [](const Tensors& in, Device) {
    Tensor out = in[0].clone(), lse = in[1].clone();
    ops::attention_merge(out, lse, in[2], in[3], 3);
    return Tensors{out, lse};
  };
  t.add("attention_merge", Op::attention_merge, kFloat, {{2, 37, 3, 67}, {2, 29, 3, 67}}, run, inputs);
}

void embedding_cases(CaseTable& t) {
  // Forward: shapes {weight [V, D], ids}. Backward: shapes {[V, D], ids}, dout = ids + [D].
  const auto inputs = [](bool backward, DType id_dtype, bool frequent_token) -> MakeInputs {
    return [=](Rng& gen, DType d, const Shapes& s) {
      const std::int64_t vocab = s[0][0], dim = s[0][1];
      Tensor ids = random_ids(gen, s[1], vocab);
      if (frequent_token) {  // half the tokens are one id (padding, end of text): one long run of equal ids
        auto v = ids.span<std::int64_t>();
        for (std::size_t i = 0; i < v.size(); i += 2) v[i] = vocab - 47;
      }
      ids = ids.to(id_dtype);
      if (!backward) return Tensors{uniform(gen, s[0], d), ids};
      std::vector<std::int64_t> dout = s[1].dims();
      dout.push_back(dim);
      return Tensors{uniform(gen, Shape(dout), d), ids};
    };
  };
  const RunOp fwd = [](const Tensors& in, Device) { return Tensors{ops::embedding(in[0], in[1])}; };
  const auto bwd = [](std::int64_t vocab) -> RunOp {
    return [vocab](const Tensors& in, Device) { return Tensors{ops::embedding_backward(in[0], in[1], vocab)}; };
  };
  t.add("embedding", Op::embedding, kFloat, {{997, 100}, {3, 37}}, fwd, inputs(false, DType::i64, false));
  t.add("embedding_i32_ids", Op::embedding, kF32, {{997, 100}, {3, 37}}, fwd, inputs(false, DType::i32, false));
  t.add("embedding_gpt2", Op::embedding, kRealistic, {{50304, 768}, {8, 64}}, fwd, inputs(false, DType::i64, true));
  t.add("embedding_backward", Op::embedding, kFloat, {{61, 100}, {3, 37}}, bwd(61), inputs(true, DType::i64, false));
  t.add("embedding_backward_i32_ids", Op::embedding, kF32, {{61, 100}, {3, 37}}, bwd(61),
        inputs(true, DType::i32, false));
  t.add("embedding_backward_gpt2", Op::embedding, kRealistic, {{50304, 768}, {8, 64}}, bwd(50304),
        inputs(true, DType::i64, true));
  // Into a gradient buffer (f32 for 16-bit dout): used rows gain their sums, the others stay as they were.
  const MakeInputs into_inputs = [inputs](Rng& gen, DType d, const Shapes& s) {
    Tensors in = inputs(true, DType::i64, true)(gen, d, s);
    const bool half = d == DType::bf16 || d == DType::f16;
    in.push_back(uniform(gen, s[0], half ? DType::f32 : d));
    return in;
  };
  const auto into = [](bool accumulate) -> RunOp {
    return [accumulate](const Tensors& in, Device) {
      Tensor dweight = in[2].clone();
      ops::embedding_backward_into(in[0], in[1], dweight, accumulate);
      return Tensors{dweight};
    };
  };
  t.add("embedding_backward_into_accumulate", Op::embedding, kFloat, {{997, 100}, {3, 37}}, into(true), into_inputs);
  t.add("embedding_backward_into_overwrite", Op::embedding, kFloat, {{997, 100}, {3, 37}}, into(false), into_inputs);
}

void loss_cases(CaseTable& t) {
  // cross_entropy: shapes {logits [..., V]}; targets with ignored rows; logits of ±4 (a peaked softmax).
  const auto ce_inputs = [](bool backward, DType target_dtype) -> MakeInputs {
    return [=](Rng& gen, DType d, const Shapes& s) {
      const std::vector<std::int64_t>& dims = s[0].dims();
      const Shape rows(std::vector<std::int64_t>(dims.begin(), dims.end() - 1));
      Tensor logits = uniform(gen, s[0], d, -4, 4),
             targets = targets_with_ignored(gen, rows, s[0].last(), target_dtype);
      if (!backward) return Tensors{logits, targets};
      const Tensor lse = ops::cross_entropy(logits, targets).lse;
      return Tensors{logits, targets, lse, uniform(gen, rows, loss_dtype(d), 0.5, 1.5)};
    };
  };
  const RunOp ce = [](const Tensors& in, Device) {
    auto r = ops::cross_entropy(in[0], in[1]);
    return Tensors{r.losses, r.lse, Tensor::scalar(static_cast<double>(r.count), DType::f64)};
  };
  const RunOp ce_bwd = [](const Tensors& in, Device) {
    return Tensors{ops::cross_entropy_backward(in[0], in[1], in[2], in[3])};
  };
  for (const bool bwd : {false, true}) {
    const std::string name = bwd ? "cross_entropy_backward" : "cross_entropy";
    const RunOp& run = bwd ? ce_bwd : ce;
    t.add(name, Op::cross_entropy, kFloat, {{3, 37, 1000}}, run, ce_inputs(bwd, DType::i64));
    t.add(name + "_i32_targets", Op::cross_entropy, kF32, {{37, 1000}}, run, ce_inputs(bwd, DType::i32));
    t.add(name + "_gpt2_vocab", Op::cross_entropy, kRealistic, {{64, 50304}}, run, ce_inputs(bwd, DType::i64));
    t.add(name + "_unpadded_vocab", Op::cross_entropy, kNoF64, {{16, 50257}}, run, ce_inputs(bwd, DType::i64));
  }

  // Vocabulary-parallel pieces: shapes {logits [N, V_local]}; this rank holds global ids
  // [begin, begin + V_local) of a vocabulary of `vocab` (the rest of its columns are padding).
  struct Slice {
    std::string name;
    Shape logits;
    std::int64_t begin, vocab;
    std::vector<DType> dtypes;
  };
  const std::vector<Slice> slices = {
      {"first_rank", {37, 512}, 0, 1000, kFloat},
      {"padded_rank", {37, 512}, 512, 1000, kFloat},  // 488 real columns, 24 padding
      {"padding_only", {37, 64}, 1024, 1000, kF32},   // no real column: row_max −inf, sums 0
      {"gpt2_tp2", {64, 25152}, 25152, 50257, kRealistic},
  };
  for (const Slice& sl : slices) {
    const std::int64_t begin = sl.begin, vocab = sl.vocab;
    const auto inputs = [vocab](bool backward) -> MakeInputs {
      return [=](Rng& gen, DType d, const Shapes& s) {
        Tensor logits = uniform(gen, s[0], d, -4, 4), targets = targets_with_ignored(gen, {s[0][0]}, vocab);
        if (!backward) return Tensors{logits, targets};
        // The group's statistics: any maxima above the slice's and positive sums will do for the comparison.
        return Tensors{logits, targets, uniform(gen, {s[0][0]}, loss_dtype(d), 4, 5),
                       uniform(gen, {s[0][0]}, loss_dtype(d), 50, 500)};
      };
    };
    t.add(
        "vocab_parallel_partials_" + sl.name, Op::cross_entropy, sl.dtypes, {sl.logits},
        [begin, vocab](const Tensors& in, Device) {
          auto p = ops::vocab_parallel_cross_entropy_partials(in[0], in[1], begin, vocab);
          return Tensors{p.row_max, p.packed, Tensor::scalar(static_cast<double>(p.count), DType::f64)};
        },
        inputs(false));
    t.add(
        "vocab_parallel_backward_" + sl.name, Op::cross_entropy, sl.dtypes, {sl.logits},
        [begin, vocab](const Tensors& in, Device) {
          return Tensors{
              ops::vocab_parallel_cross_entropy_backward(in[0], in[1], in[2], in[3], 1.0 / 37, begin, vocab)};
        },
        inputs(true));
  }
  // In place on the sums; row_max −inf (a rank without real columns) must give 0, not NaN.
  t.add(
      "vocab_parallel_rebase_sums", Op::cross_entropy, kMaster, {{1000}},
      [](const Tensors& in, Device) {
        Tensor sums = in[0];
        ops::vocab_parallel_rebase_sums(sums, in[1], in[2]);
        return Tensors{sums};
      },
      [](Rng& gen, DType d, const Shapes& s) {
        Tensor sums = uniform(gen, s[0], DType::f64, 1, 100), row_max = uniform(gen, s[0], DType::f64);
        Tensor group_max = uniform(gen, s[0], DType::f64, 1, 3);
        for (std::size_t i = 0; i < sums.span<double>().size(); i += 9) {
          row_max.span<double>()[i] = -std::numeric_limits<double>::infinity();
          sums.span<double>()[i] = 0;
        }
        return Tensors{sums.to(d), row_max.to(d), group_max.to(d)};
      });
}

void dropout_cases(CaseTable& t) {
  const CounterRng rng(20240611, "consistency/dropout");
  const GlobalSlice slice{{80, 2000}, {11, 500}};  // a shard of a larger tensor: the mask follows global indices
  const RunOp fwd = [rng](const Tensors& in, Device) { return Tensors{ops::dropout(in[0], 0.1, rng)}; };
  const RunOp bwd = [rng](const Tensors& in, Device) { return Tensors{ops::dropout_backward(in[0], 0.1, rng)}; };
  const RunOp sliced = [rng, slice](const Tensors& in, Device) {
    return Tensors{ops::dropout(in[0], 0.3, rng, slice), ops::dropout_backward(in[0], 0.3, rng, slice)};
  };
  t.add("dropout", Op::dropout, kFloat, {{37, 1001}}, fwd);
  t.add("dropout_backward", Op::dropout, kFloat, {{37, 1001}}, bwd);
  t.add("dropout_global_slice", Op::dropout, kNoF64, {{37, 1000}}, sliced);
  t.add("dropout_gpt2", Op::dropout, kRealistic, {{8, 64, 768}}, fwd);
}

void rope_cases(CaseTable& t) {
  // shapes {x [B, T, H, D]}; explicit positions are random in [0, 4096), on the run's device.
  const auto with_positions = [](DType pos_dtype) -> MakeInputs {
    return [=](Rng& gen, DType d, const Shapes& s) {
      return Tensors{uniform(gen, s[0], d), random_ids(gen, {s[0][1]}, 4096, pos_dtype)};
    };
  };
  const auto offset = [](std::int64_t position_offset, RopeFrequencies freq, bool backward) -> RunOp {
    return [=](const Tensors& in, Device) {
      return Tensors{backward ? ops::rope_backward(in[0], position_offset, freq)
                              : ops::rope(in[0], position_offset, freq)};
    };
  };
  const auto positions = [](bool backward) -> RunOp {
    return [=](const Tensors& in, Device) {
      return Tensors{backward ? ops::rope_backward(in[0], in[1]) : ops::rope(in[0], in[1])};
    };
  };
  for (const bool bwd : {false, true}) {
    const std::string name = bwd ? "rope_backward" : "rope";
    t.add(name, Op::rope, kFloat, {{2, 37, 5, 24}}, offset(7, {10000.0}, bwd));
    t.add(name + "_gpt2_shape", Op::rope, kRealistic, {{8, 64, 12, 64}}, offset(0, {10000.0}, bwd));
    t.add(name + "_llama", Op::rope, kRealistic, {{2, 128, 8, 128}}, offset(3000, {500000.0}, bwd));
    t.add(name + "_llama31", Op::rope, kRealistic, {{2, 128, 8, 128}},
          offset(9000, {500000.0, RopeScaling::llama3, 8.0, 1.0, 4.0, 8192.0}, bwd));
    t.add(name + "_positions", Op::rope, kFloat, {{2, 37, 5, 24}}, positions(bwd), with_positions(DType::i64));
    t.add(name + "_i32_positions", Op::rope, kF32, {{2, 37, 5, 24}}, positions(bwd), with_positions(DType::i32));
  }
}

void shape_cases(CaseTable& t) {
  const auto permute = [](std::vector<std::int64_t> dims) -> RunOp {
    return [dims](const Tensors& in, Device) { return Tensors{ops::permute(in[0], dims)}; };
  };
  t.add("reshape", Op::reshape, kAnyDType, {{37, 1000}}, [](const Tensors& in, Device) {
    return Tensors{ops::reshape(in[0], {1000, -1}), ops::reshape(in[0], {37000})};
  });
  t.add("permute_2d", Op::permute, kAnyDType, {{37, 1000}}, permute({1, 0}));
  t.add("permute_heads", Op::permute, kAnyDType, {{3, 37, 5, 24}}, permute({0, 2, 1, 3}));
  t.add("permute_4d", Op::permute, kAnyDType, {{3, 37, 5, 24}}, permute({2, 0, 3, 1}));
  t.add("permute_3d", Op::permute, kAnyDType, {{5, 7, 11}}, permute({2, 1, 0}));
  t.add("permute_heads_gpt2", Op::permute, kRealistic, {{8, 64, 12, 64}}, permute({0, 2, 1, 3}));
  t.add("transpose", Op::transpose, kAnyDType, {{3, 37, 5, 24}}, [](const Tensors& in, Device) {
    return Tensors{ops::transpose(in[0], 1, 2), ops::transpose(in[0], -1, 0)};
  });

  const auto split = [](std::vector<std::int64_t> sizes, std::int64_t dim) -> RunOp {
    return [sizes, dim](const Tensors& in, Device) { return ops::split(in[0], sizes, dim); };
  };
  t.add("split_last_dim", Op::split, kAnyDType, {{37, 1000}}, split({300, 1, 699}, -1));
  t.add("split_dim0", Op::split, kAnyDType, {{37, 1000}}, split({10, 27}, 0));
  t.add("split_middle_dim", Op::split, kAnyDType, {{3, 37, 5, 24}}, split({2, 3}, 2));
  t.add("split_qkv_gpt2", Op::split, kRealistic, {{8, 64, 2304}}, split({768, 768, 768}, -1));

  const auto concat = [](std::int64_t dim) -> RunOp {
    return [dim](const Tensors& in, Device) { return Tensors{ops::concat(in, dim)}; };
  };
  t.add("concat_last_dim", Op::concat, kAnyDType, {{37, 300}, {37, 1}, {37, 699}}, concat(-1));
  t.add("concat_dim0", Op::concat, kAnyDType, {{10, 1000}, {27, 1000}}, concat(0));
  t.add("concat_middle_dim", Op::concat, kAnyDType, {{3, 37, 2, 24}, {3, 37, 3, 24}}, concat(2));
  t.add("concat_qkv_gpt2", Op::concat, kRealistic, {{8, 64, 768}, {8, 64, 768}, {8, 64, 768}}, concat(-1));

  const auto slice = [](std::int64_t dim, std::int64_t start, std::int64_t end) -> RunOp {
    return [=](const Tensors& in, Device) { return Tensors{ops::slice(in[0], dim, start, end)}; };
  };
  t.add("slice_last_dim", Op::slice, kAnyDType, {{37, 1000}}, slice(-1, 13, 500));
  t.add("slice_dim0", Op::slice, kAnyDType, {{37, 1000}}, slice(0, 5, 36));
  t.add("slice_middle_dim", Op::slice, kAnyDType, {{3, 37, 5, 24}}, slice(1, 5, 30));
  // The rest of the output is zeros that the kernel must write (the output starts as NaN).
  t.add("slice_backward", Op::slice, kAnyDType, {{37, 487}}, [](const Tensors& in, Device) {
    return Tensors{ops::slice_backward(in[0], {37, 1000}, 1, 13)};
  });
  t.add("slice_backward_dim0", Op::slice, kAnyDType, {{3, 37, 5, 24}}, [](const Tensors& in, Device) {
    return Tensors{ops::slice_backward(in[0], {7, 37, 5, 24}, 0, 2)};
  });
}

void optimizer_cases(CaseTable& t) {
  // shapes {param} (1-D params are also ZeRO shards). Parameters of ±1e-2 with lr 1e-2, so that
  // the update is as large as the parameter and its error shows in the comparison.
  ops::AdamWConfig config;
  config.lr = 1e-2;
  config.weight_decay = 0.1;
  // grad_dtype: the param's when not given.
  const auto adamw_inputs = [](std::optional<DType> grad_dtype, bool first_step) -> MakeInputs {
    return [=](Rng& gen, DType d, const Shapes& s) {
      const Tensor param = uniform(gen, s[0], d, -1e-2, 1e-2);
      const Tensor grad = uniform(gen, s[0], grad_dtype.value_or(d), -1e-1, 1e-1);
      const Tensor m = first_step ? Tensor::zeros(s[0], d) : uniform(gen, s[0], d, -1e-2, 1e-2);
      const Tensor v = first_step ? Tensor::zeros(s[0], d) : uniform(gen, s[0], d, 0, 1e-4);
      return Tensors{param, grad, m, v};
    };
  };
  // With copy_dtype, the step also writes param_copy (allocated on the run's device, so poisoned on CUDA);
  // a shard runs on views one element into each input.
  const auto adamw = [config](std::int64_t step, std::optional<DType> copy_dtype, bool shard) -> RunOp {
    return [=](const Tensors& in, Device device) {
      const auto arg = [&](std::size_t i) { return shard ? misaligned(in[i]) : in[i]; };
      Tensor p = arg(0), g = arg(1), m = arg(2), v = arg(3);
      Tensor copy = copy_dtype ? Tensor::empty(p.shape(), *copy_dtype, device) : Tensor();
      ops::adamw_step(p, g, m, v, config, step, 0.5, copy.defined() ? &copy : nullptr);
      return Tensors{p, m, v, copy};
    };
  };
  t.add("adamw_step", Op::adamw, kMaster, {{37, 1001}}, adamw(10, std::nullopt, false),
        adamw_inputs(std::nullopt, false));
  t.add("adamw_step_first", Op::adamw, kMaster, {{37, 1001}}, adamw(1, std::nullopt, false),
        adamw_inputs(std::nullopt, true));
  t.add("adamw_step_bf16_grad_and_copy", Op::adamw, kF32, {{37, 1001}}, adamw(10, DType::bf16, false),
        adamw_inputs(DType::bf16, false));
  t.add("adamw_step_f16_grad_and_copy", Op::adamw, kF32, {{37, 1001}}, adamw(10, DType::f16, false),
        adamw_inputs(DType::f16, false));
  t.add("adamw_step_misaligned_shard", Op::adamw, kF32, {{1 + 4099}}, adamw(3, DType::bf16, true),
        adamw_inputs(DType::bf16, false));
  t.add("adamw_step_gpt2_mlp", Op::adamw, kF32, {{768 * 3072}}, adamw(100, DType::bf16, false),
        adamw_inputs(DType::bf16, false));
  // Three tensors of unequal sizes (one smaller than a chunk, one spanning several) in one launch.
  t.add(
      "adamw_step_multi", Op::adamw_step_multi, kMaster, {{37, 1001}, {5}, {70000}},
      [config](const Tensors& in, Device) {
        Tensors p, g, m, v;
        for (std::size_t i = 0; i < 12; i += 4) {
          p.push_back(in[i]);
          g.push_back(in[i + 1]);
          m.push_back(in[i + 2]);
          v.push_back(in[i + 3]);
        }
        std::vector<ops::AdamWTensors> group;
        for (std::size_t i = 0; i < 3; ++i) group.push_back({&p[i], &g[i], &m[i], &v[i]});
        ops::adamw_step_multi(group, config, 10, 0.5);
        return Tensors{p[0], m[0], v[0], p[1], m[1], v[1], p[2], m[2], v[2]};
      },
      [adamw_inputs](Rng& gen, DType d, const Shapes& s) {
        Tensors all;
        for (const Shape& shape : s) {
          const Tensors one = adamw_inputs(std::nullopt, false)(gen, d, Shapes{shape});
          all.insert(all.end(), one.begin(), one.end());
        }
        return all;
      });

  const auto sgd = [](double momentum, bool nesterov, bool first_step) -> RunOp {
    return [=](const Tensors& in, Device) {
      Tensor p = in[0], buf = first_step || momentum == 0 ? Tensor() : in[2];
      ops::sgd_step(p, in[1], buf, 1e-2, momentum, 0.01, 0.0, nesterov, 0.5);
      return Tensors{p, buf};
    };
  };
  t.add("sgd_step_first_momentum", Op::sgd_step, kMaster, {{37, 1001}, {37, 1001}}, sgd(0.9, false, true),
        uniform_in(-1e-2, 1e-2));
  t.add("sgd_step_nesterov", Op::sgd_step, kMaster, {{37, 1001}, {37, 1001}, {37, 1001}}, sgd(0.9, true, false),
        uniform_in(-1e-2, 1e-2));
  t.add("sgd_step_plain", Op::sgd_step, kMaster, {{37, 1001}, {37, 1001}}, sgd(0, false, false), uniform_in(-1e-2, 1e-2));

  const RunOp sum_of_squares = [](const Tensors& in, Device) {
    return Tensors{Tensor::scalar(ops::sum_of_squares(in[0]), DType::f64)};
  };
  t.add("sum_of_squares", Op::adamw, kFloat, {{37, 1001}}, sum_of_squares);
  t.add("sum_of_squares_misaligned", Op::adamw, kNoF64, {{1 + 4099}}, [](const Tensors& in, Device) {
    return Tensors{Tensor::scalar(ops::sum_of_squares(misaligned(in[0])), DType::f64)};
  });
  t.add("sum_of_squares_gpt2_mlp", Op::adamw, kRealistic, {{768 * 3072}}, sum_of_squares);
}

void matmul_cases(CaseTable& t) {
  const auto mm = [](bool trans_a, bool trans_b) -> RunOp {
    return [=](const Tensors& in, Device) { return Tensors{ops::matmul(in[0], in[1], trans_a, trans_b)}; };
  };
  t.add("matmul", Op::matmul, kFloat, {{37, 1000}, {1000, 53}}, mm(false, false));
  t.add("matmul_trans_a", Op::matmul, kFloat, {{1000, 37}, {1000, 53}}, mm(true, false));
  t.add("matmul_trans_b", Op::matmul, kFloat, {{37, 1000}, {53, 1000}}, mm(false, true));
  t.add("matmul_trans_ab", Op::matmul, kFloat, {{1000, 37}, {53, 1000}}, mm(true, true));
  t.add("matmul_batched", Op::matmul, kFloat, {{3, 37, 100}, {3, 100, 29}}, mm(false, false));
  t.add("matmul_batched_4d_trans_b", Op::matmul, kFloat, {{2, 3, 37, 64}, {2, 3, 29, 64}}, mm(false, true));
  t.add("matmul_broadcast_b", Op::matmul, kFloat, {{4, 37, 100}, {100, 45}}, mm(false, false));
  t.add("matmul_broadcast_a_trans_a", Op::matmul, kFloat, {{100, 37}, {3, 100, 45}}, mm(true, false));
  t.add("matmul_gpt2_qkv", Op::matmul, kRealistic, {{8 * 64, 768}, {2304, 768}}, mm(false, true));
  t.add("matmul_gpt2_weight_grad", Op::matmul, kRealistic, {{8 * 64, 2304}, {8 * 64, 768}}, mm(true, false));
  // An odd dimension (a vocabulary such as GPT-2's 50257) in the LM head's three GEMMs, large enough that
  // CUDA runs them padded: N (the logits), K (their gradient times the weight: the padding is summed
  // over and must be zero) and M under a transposed A (the weight gradient).
  t.add("matmul_padded_c", Op::matmul, kFloat, {{256, 768}, {1001, 768}}, mm(false, true));
  t.add("matmul_padded_a", Op::matmul, kFloat, {{256, 1001}, {1001, 768}}, mm(false, false));
  t.add("matmul_padded_trans_a", Op::matmul, kFloat, {{256, 1001}, {256, 768}}, mm(true, false));

  // matmul_into: out = alpha op(a) op(b) + beta out. With beta 0 the output starts as NaN on CUDA
  // (poisoned) and must be ignored; with beta 1 it is an input and accumulates (gradient buffers).
  // shapes {a, b, out}; out has a's dtype unless into_inputs is given another.
  const auto into = [](double alpha, double beta) -> RunOp {
    return [=](const Tensors& in, Device device) {
      Tensor out = beta == 0 ? Tensor::empty(in[2].shape(), in[2].dtype(), device) : in[2];
      ops::matmul_into(in[0], in[1], out, false, true, alpha, beta);
      return Tensors{out};
    };
  };
  const auto into_inputs = [](std::optional<DType> out_dtype) -> MakeInputs {
    return [=](Rng& gen, DType d, const Shapes& s) {
      return Tensors{uniform(gen, s[0], d), uniform(gen, s[1], d), uniform(gen, s[2], out_dtype.value_or(d))};
    };
  };
  const Shapes into_shapes = {{37, 1000}, {53, 1000}, {37, 53}};
  t.add("matmul_into_f32_out", Op::matmul, {DType::bf16, DType::f16}, into_shapes, into(1, 0), into_inputs(DType::f32));
  t.add("matmul_into_f32_out_accumulate", Op::matmul, {DType::bf16, DType::f16}, into_shapes, into(0.5, 1),
        into_inputs(DType::f32));
  t.add("matmul_into_accumulate", Op::matmul, kFloat, into_shapes, into(-2, 1), into_inputs(std::nullopt));
  t.add("matmul_into_gpt2_weight_grad", Op::matmul, {DType::bf16}, {{768, 8 * 64}, {2304, 8 * 64}, {768, 2304}},
        into(1, 1), into_inputs(DType::f32));
  // Accumulating into a C of odd width: the padded copy starts as C.
  t.add("matmul_into_padded_accumulate", Op::matmul, {DType::f32, DType::bf16}, {{256, 768}, {1001, 768}, {256, 1001}},
        into(0.5, 1), into_inputs(std::nullopt));
  t.add("matmul_into_padded_f32_out", Op::matmul, {DType::bf16}, {{256, 768}, {1001, 768}, {256, 1001}}, into(1, 0),
        into_inputs(DType::f32));

  const RunOp linear = [](const Tensors& in, Device) { return Tensors{ops::linear(in[0], in[1], in[2])}; };
  const RunOp linear_no_bias = [](const Tensors& in, Device) { return Tensors{ops::linear(in[0], in[1])}; };
  t.add("linear", Op::linear, kFloat, {{2, 37, 100}, {45, 100}, {45}}, linear);
  t.add("linear_no_bias", Op::linear, kFloat, {{2, 37, 100}, {45, 100}}, linear_no_bias);
  t.add("linear_gpt2_qkv", Op::linear, kRealistic, {{8, 64, 768}, {2304, 768}, {2304}}, linear);
}

}  // namespace

const std::vector<ConsistencyCase>& consistency_cases() {
  static const std::vector<ConsistencyCase> cases = [] {
    CaseTable t;
    elementwise_cases(t);
    reduce_cases(t);
    activation_cases(t);
    norm_cases(t);
    softmax_cases(t);
    attention_cases(t);
    attention_merge_cases(t);
    sparse_attention_cases(t);
    embedding_cases(t);
    loss_cases(t);
    dropout_cases(t);
    rope_cases(t);
    shape_cases(t);
    optimizer_cases(t);
    matmul_cases(t);
    return t.cases;
  }();
  return cases;
}

}  // namespace trident::consistency
