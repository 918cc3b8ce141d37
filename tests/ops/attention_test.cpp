// Blocked attention kernel vs the naive f64 attention at sizes that cross tile
// boundaries (and are not multiples of the tile), forward and backward, with
// and without a sliding window and a key-padding mask; thread-count invariance;
// fully masked rows and fully padded samples; dropout on the probabilities
// (against the naive attention with the same mask, its drop rate and scale,
// bit-identical shards of samples and heads); argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "attention_reference.h"
#include "attention_test_util.h"
#include "trident/autograd/autograd.h"
#include "trident/core/parallel.h"
#include "trident/kernels/cpu/attention.h"
#include "trident/ops/attention.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/shape.h"

namespace trident::testing {
namespace {

struct Problem {
  std::int64_t B, T, S, H, Hkv, D;
  bool causal;
  bool with_mask = false;
  std::int64_t window = 0;
  bool key_padding = false;  // a key-padding mask of padded_keys(B, S)
  DType key_mask_dtype = DType::i64;
  double dropout = 0;  // on the probabilities, as samples 3.. and heads 1.. of H + 2 (kDropoutRng)
  bool documents = false;  // packed documents of packed_documents(B, T)
};

// Problem p with the packed documents of packed_documents.
Problem packed(Problem p) {
  p.documents = true;
  return p;
}

// Problem p with dropout on the probabilities.
Problem dropped(Problem p, double rate = 0.2) {
  p.dropout = rate;
  return p;
}

// Problem p with the key-padding mask of padded_keys (in `dtype`).
Problem padded(Problem p, DType dtype = DType::i64) {
  p.key_padding = true;
  p.key_mask_dtype = dtype;
  return p;
}

// A key-padding mask [B, S] (1 real, 0 padding) whose samples, in turn: have no
// padding; the last third of the keys padded (right padding: at S = 300 whole
// 64-key tiles hold padding only); a run of S/2 keys from S/4 padded (padding in
// the middle, covering a whole tile at S = 300); the first S/2 + 1 keys padded
// (left padding: under causal the early queries see no key at all).
Tensor padded_keys(std::int64_t B, std::int64_t S, DType dtype) {
  std::vector<std::int64_t> m(static_cast<std::size_t>(B * S), 1);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s) {
      bool pad = false;
      switch (b % 4) {
        case 1:
          pad = s >= S - std::max<std::int64_t>(3, S / 3);
          break;
        case 2:
          pad = s >= S / 4 && s < S / 4 + std::max<std::int64_t>(2, S / 2);
          break;
        case 3:
          pad = s <= S / 2;
          break;
        default:
          break;
      }
      if (pad) m[static_cast<std::size_t>(b * S + s)] = 0;
    }
  return Tensor::from_vector<std::int64_t>(m, {B, S}).to(dtype);
}

// Runs the blocked kernel in `dtype` (forward and backward) and the naive f64
// attention on the same rounded inputs; checks relative errors (as a whole,
// and element by element against the largest element when elem_tol > 0).
void compare_with_naive(const Problem& p, DType dtype, double tol, double elem_tol = 0) {
  std::mt19937_64 gen(1234 + static_cast<std::uint64_t>(p.T * 31 + p.S));
  Tensor q = random_f64(gen, {p.B, p.T, p.H, p.D}).to(dtype);
  Tensor k = random_f64(gen, {p.B, p.S, p.Hkv, p.D}).to(dtype);
  Tensor v = random_f64(gen, {p.B, p.S, p.Hkv, p.D}).to(dtype);
  Tensor dout = random_f64(gen, {p.B, p.T, p.H, p.D}).to(dtype);
  ops::AttentionOptions options;
  options.causal = p.causal;
  options.window = p.window;
  NaiveAttention naive{p.B,      p.T, p.S, p.H, p.Hkv, p.D, p.causal, 1.0 / std::sqrt(static_cast<double>(p.D)),
                       {},       p.window};
  if (p.with_mask) {
    Tensor mask = random_f64(gen, {p.T, p.S});
    auto m = mask.span<double>();
    for (std::size_t i = 0; i < m.size(); i += 7) m[i] = -kInf;
    options.mask = mask.to(dtype);
    naive.mask = values(options.mask);
  }
  if (p.key_padding) {
    options.key_mask = padded_keys(p.B, p.S, p.key_mask_dtype);
    naive.key_mask = options.key_mask.to(DType::i64).to_vector<std::int64_t>();
  }
  if (p.documents) {
    options.document_starts = packed_documents(p.B, p.T);
    naive.doc_starts = options.document_starts.to(DType::i64).to_vector<std::int64_t>();
  }
  if (p.dropout > 0) {
    options.dropout = {p.dropout, kDropoutRng, 3, 1, p.H + 2};
    naive.keep = dropout_keep(p.B, p.H, p.T, p.S, p.dropout, kDropoutRng, 3, 1, p.H + 2);
  }
  auto [out, lse] = ops::attention(q, k, v, options);
  auto [dq, dk, dv] = ops::attention_backward(q, k, v, out, lse, dout, options);

  const auto qv = values(q), kv = values(k), vv = values(v), dov = values(dout);
  std::vector<double> rdq, rdk, rdv;
  naive.backward(qv, kv, vv, dov, rdq, rdk, rdv);
  const std::string what =
      fmt::format("B={} T={} S={} H={} Hkv={} D={} causal={} mask={} window={} key_mask={} dropout={} documents={} {}",
                  p.B, p.T, p.S, p.H, p.Hkv, p.D, p.causal, p.with_mask, p.window,
                  p.key_padding ? dtype_name(p.key_mask_dtype) : std::string_view("none"), p.dropout, p.documents,
                  dtype_name(dtype));
  EXPECT_LE(relative_error(values(out), naive.forward(qv, kv, vv)), tol) << "out, " << what;
  EXPECT_LE(relative_error(values(dv), rdv), tol) << "dv, " << what;
  if (p.causal && p.window == 1) {
    // One visible key: P = 1 and dS = dP − Di = 0 (with dropout too: Di = keep·dZ = dP), so dq and dk are
    // exactly zero; measure them against dv.
    double dv_scale = 0;
    for (double x : rdv) dv_scale = std::max(dv_scale, std::abs(x));
    for (const auto& [name, grad] : {std::pair{"dq", values(dq)}, std::pair{"dk", values(dk)}})
      for (double x : grad) ASSERT_LE(std::abs(x), tol * dv_scale) << name << ", " << what;
    return;
  }
  EXPECT_LE(relative_error(values(dq), rdq), tol) << "dq, " << what;
  EXPECT_LE(relative_error(values(dk), rdk), tol) << "dk, " << what;
  if (elem_tol > 0) {
    EXPECT_LE(max_error(values(out), naive.forward(qv, kv, vv)), elem_tol) << "out (largest element error), " << what;
    EXPECT_LE(max_error(values(dq), rdq), elem_tol) << "dq (largest element error), " << what;
    EXPECT_LE(max_error(values(dk), rdk), elem_tol) << "dk (largest element error), " << what;
    EXPECT_LE(max_error(values(dv), rdv), elem_tol) << "dv (largest element error), " << what;
  }
}

TEST(AttentionKernel, BlockedMatchesNaiveAcrossTileBoundaries) {
  // 300 = 4 full 64-row tiles + 44; D = 64 and D = 40 (padded to 48) take different tile widths.
  compare_with_naive({1, 300, 300, 2, 2, 64, true}, DType::f64, 1e-12);
  compare_with_naive({1, 300, 300, 2, 2, 64, false}, DType::f64, 1e-12);
  compare_with_naive({1, 300, 300, 2, 2, 40, true}, DType::f32, 2e-5);
}

TEST(AttentionKernel, GroupedQueryHeadsAndKvCache) {
  compare_with_naive({2, 131, 131, 4, 2, 32, true}, DType::f64, 1e-12);
  compare_with_naive({1, 70, 300, 6, 2, 16, true}, DType::f64, 1e-12);    // S > T: bottom-right causal
  compare_with_naive({1, 1, 257, 4, 1, 64, true}, DType::f32, 2e-5);      // one decoding step
  compare_with_naive({1, 200, 150, 2, 1, 24, true}, DType::f64, 1e-12);   // S < T: early rows see nothing
  compare_with_naive({1, 129, 77, 4, 4, 8, false, true}, DType::f64, 1e-12);  // additive mask
}

TEST(AttentionKernel, ReducedPrecision) {
  compare_with_naive({1, 150, 150, 4, 2, 64, true}, DType::bf16, 2e-2);
  compare_with_naive({1, 150, 150, 2, 2, 64, true}, DType::f16, 5e-3);
  compare_with_naive({1, 100, 90, 2, 1, 40, true}, DType::bf16, 2e-2);  // D not a multiple of 16
  compare_with_naive({1, 70, 130, 3, 3, 24, false, true}, DType::f16, 5e-3);
}

// bf16 runs its tile products as AVX512-BF16 dot products where the CPU has
// them (attention_bf16.cpp): every layout corner of that path against f64.
TEST(AttentionKernel, Bf16DotProductPath) {
  if (!kernels::cpu::attention_uses_bf16_dot_products()) {
    GTEST_SKIP() << "built without AVX512-BF16: bf16 takes the f32-compute path (AttentionKernel.ReducedPrecision)";
  }
  const double tol = 1e-2, elem = 2e-2;
  compare_with_naive({2, 131, 131, 4, 2, 32, true}, DType::bf16, tol, elem);       // GQA, partial tiles
  compare_with_naive({1, 70, 300, 6, 2, 16, true}, DType::bf16, tol, elem);        // S > T
  compare_with_naive({1, 200, 150, 2, 1, 24, true}, DType::bf16, tol, elem);       // S < T: rows see nothing
  compare_with_naive({1, 129, 77, 4, 4, 8, false, true}, DType::bf16, tol, elem);  // additive mask, D = 8
  compare_with_naive({1, 1, 257, 4, 1, 64, true}, DType::bf16, tol, elem);         // one decoding step
  compare_with_naive({1, 67, 67, 2, 1, 128, true}, DType::bf16, tol, elem);        // D = 128
  compare_with_naive({2, 64, 64, 3, 3, 40, false}, DType::bf16, tol, elem);        // D = 40 (48 padded)
}

// Sliding windows across 64-key tiles: windows that end inside a tile, span
// several, equal a tile, cover everything, and window 1 (each query sees only
// itself); with a KV cache (S > T), more queries than keys, GQA and a mask.
TEST(AttentionKernel, SlidingWindowMatchesNaive) {
  for (std::int64_t w : {1, 5, 64, 70, 129, 300, 1000}) {
    compare_with_naive({1, 300, 300, 2, 2, 32, true, false, w}, DType::f64, 1e-12);
  }
  compare_with_naive({1, 300, 300, 2, 2, 40, true, false, 100}, DType::f32, 2e-5);
  compare_with_naive({2, 131, 131, 4, 2, 32, true, false, 37}, DType::f64, 1e-12);     // GQA
  compare_with_naive({1, 70, 300, 6, 2, 16, true, false, 100}, DType::f64, 1e-12);     // S > T (cache)
  compare_with_naive({1, 70, 300, 6, 2, 16, true, false, 20}, DType::f64, 1e-12);      // cache, small window
  compare_with_naive({1, 1, 257, 4, 1, 64, true, false, 65}, DType::f32, 2e-5);        // one decoding step
  compare_with_naive({1, 200, 150, 2, 1, 24, true, false, 30}, DType::f64, 1e-12);     // S < T: rows see nothing
  compare_with_naive({1, 129, 129, 4, 4, 8, true, true, 50}, DType::f64, 1e-12);       // window and mask
  compare_with_naive({1, 150, 150, 4, 2, 64, true, false, 70}, DType::bf16, 2e-2);
  compare_with_naive({1, 150, 150, 2, 2, 64, true, false, 70}, DType::f16, 5e-3);
  compare_with_naive({1, 150, 150, 2, 2, 64, true, false, 1}, DType::f32, 2e-5);
}

TEST(AttentionKernel, SlidingWindowBf16DotProductPath) {
  if (!kernels::cpu::attention_uses_bf16_dot_products()) {
    GTEST_SKIP() << "built without AVX512-BF16: bf16 takes the f32-compute path";
  }
  const double tol = 1e-2, elem = 2e-2;
  compare_with_naive({2, 131, 131, 4, 2, 32, true, false, 37}, DType::bf16, tol, elem);
  compare_with_naive({1, 70, 300, 6, 2, 16, true, false, 100}, DType::bf16, tol, elem);
  compare_with_naive({1, 1, 257, 4, 1, 64, true, false, 65}, DType::bf16, tol, elem);
  compare_with_naive({1, 200, 150, 2, 1, 24, true, false, 30}, DType::bf16, tol, elem);
  compare_with_naive({1, 129, 129, 4, 4, 8, true, true, 64}, DType::bf16, tol, elem);
  compare_with_naive({1, 150, 150, 2, 2, 40, true, false, 1}, DType::bf16, tol, elem);
}

// A window at least as long as the keys changes nothing: bit-identical to window 0.
TEST(AttentionKernel, WindowCoveringEverythingEqualsFullAttention) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    std::mt19937_64 gen(3);
    Tensor q = random_f64(gen, {1, 150, 2, 32}).to(dtype);
    Tensor k = random_f64(gen, {1, 190, 2, 32}).to(dtype);
    Tensor v = random_f64(gen, {1, 190, 2, 32}).to(dtype);
    Tensor dout = random_f64(gen, {1, 150, 2, 32}).to(dtype);
    ops::AttentionOptions full, windowed;
    windowed.window = 190;
    auto [o1, l1] = ops::attention(q, k, v, full);
    auto [o2, l2] = ops::attention(q, k, v, windowed);
    auto [dq1, dk1, dv1] = ops::attention_backward(q, k, v, o1, l1, dout, full);
    auto [dq2, dk2, dv2] = ops::attention_backward(q, k, v, o2, l2, dout, windowed);
    EXPECT_EQ(values(o1), values(o2)) << dtype_name(dtype);
    EXPECT_EQ(values(l1), values(l2)) << dtype_name(dtype);
    EXPECT_EQ(values(dq1), values(dq2)) << dtype_name(dtype);
    EXPECT_EQ(values(dk1), values(dk2)) << dtype_name(dtype);
    EXPECT_EQ(values(dv1), values(dv2)) << dtype_name(dtype);
  }
}

// Key padding across 64-key tiles (tiles of padding only are skipped): four
// samples padded differently (padded_keys), with and without causal, a KV
// cache, fewer keys than queries, GQA, a sliding window and an additive mask;
// every dtype and every key-mask dtype.
TEST(AttentionKernel, KeyPaddingMatchesNaive) {
  for (bool causal : {false, true}) {
    compare_with_naive(padded({4, 300, 300, 2, 2, 32, causal}), DType::f64, 1e-12);
    compare_with_naive(padded({4, 300, 300, 2, 2, 40, causal}, DType::i32), DType::f32, 2e-5);
    compare_with_naive(padded({4, 150, 150, 4, 2, 64, causal}, DType::u8), DType::bf16, 2e-2);
    compare_with_naive(padded({4, 150, 150, 2, 2, 64, causal}), DType::f16, 5e-3);
    compare_with_naive(padded({4, 70, 300, 6, 2, 16, causal}), DType::f64, 1e-12);       // S > T (KV cache)
    compare_with_naive(padded({4, 1, 257, 4, 1, 64, causal}), DType::f32, 2e-5);         // one decoding step
    compare_with_naive(padded({4, 129, 77, 4, 4, 8, causal, true}), DType::f64, 1e-12);  // additive mask too
  }
  compare_with_naive(padded({4, 200, 150, 2, 1, 24, true}), DType::f64, 1e-12);                       // S < T
  compare_with_naive(padded({4, 131, 131, 4, 2, 32, true, false, 37}), DType::f64, 1e-12);            // window
  compare_with_naive(padded({4, 70, 300, 6, 2, 16, true, true, 100}, DType::u8), DType::f64, 1e-12);  // all
}

TEST(AttentionKernel, PackedDocumentsMatchNaive) {
  compare_with_naive(packed({4, 300, 300, 2, 2, 32, true}), DType::f64, 1e-12);
  compare_with_naive(packed({4, 300, 300, 4, 2, 40, true}), DType::f32, 2e-5);
  compare_with_naive(packed({4, 150, 150, 4, 2, 64, true}), DType::bf16, 2e-2);
  compare_with_naive(packed({4, 150, 150, 2, 2, 64, true}), DType::f16, 5e-3);
  compare_with_naive(packed({4, 257, 257, 4, 1, 16, true, true, 70}), DType::f64, 1e-12);       // mask, window
  compare_with_naive(packed(padded({4, 200, 200, 2, 1, 24, true})), DType::f64, 1e-12);          // key padding
  compare_with_naive(packed(dropped({4, 131, 131, 2, 2, 16, true})), DType::f64, 1e-12);         // dropout
}

TEST(AttentionKernel, PackedDocumentsBf16DotProductPath) {
  if (!kernels::cpu::attention_uses_bf16_dot_products()) {
    GTEST_SKIP() << "built without AVX512-BF16: bf16 takes the f32-compute path (AttentionKernel.PackedDocumentsMatchNaive)";
  }
  compare_with_naive(packed({4, 300, 300, 4, 2, 32, true}), DType::bf16, 1e-2, 2e-2);
  compare_with_naive(packed(padded({4, 150, 150, 2, 1, 40, true, false, 70})), DType::bf16, 1e-2, 2e-2);
}

// A packed sample of several documents gives, row for row, what each document gives alone (the same
// numbers: each document's queries run over its own keys in the same order), and bad starts are refused.
TEST(AttentionKernel, PackedDocumentsEqualSeparateDocuments) {
  std::mt19937_64 gen(99);
  const std::vector<std::int64_t> lengths = {70, 1, 64, 93};  // T = 228: documents across tile boundaries
  const std::int64_t T = 228, H = 4, Hkv = 2, D = 16;
  Tensor q = random_f64(gen, {1, T, H, D}).to(DType::f32);
  Tensor k = random_f64(gen, {1, T, Hkv, D}).to(DType::f32);
  Tensor v = random_f64(gen, {1, T, Hkv, D}).to(DType::f32);
  Tensor dout = random_f64(gen, {1, T, H, D}).to(DType::f32);
  std::vector<std::int32_t> starts;
  for (std::int64_t at = 0; std::int64_t n : lengths) {
    for (std::int64_t i = 0; i < n; ++i) starts.push_back(static_cast<std::int32_t>(at));
    at += n;
  }
  ops::AttentionOptions packed_options;
  packed_options.document_starts = Tensor::from_vector<std::int32_t>(starts, {1, T});
  auto [out, lse] = ops::attention(q, k, v, packed_options);
  auto [dq, dk, dv] = ops::attention_backward(q, k, v, out, lse, dout, packed_options);
  for (std::int64_t at = 0; std::int64_t n : lengths) {
    const auto part = [&](const Tensor& t) { return ops::slice(t, 1, at, at + n); };
    auto [o1, l1] = ops::attention(part(q), part(k), part(v));
    auto [dq1, dk1, dv1] = ops::attention_backward(part(q), part(k), part(v), o1, l1, part(dout));
    SCOPED_TRACE(fmt::format("document [{}, {})", at, at + n));
    EXPECT_LE(max_error(values(part(out)), values(o1)), 1e-6);
    EXPECT_LE(max_error(values(part(dq)), values(dq1)), 1e-6);
    EXPECT_LE(max_error(values(part(dk)), values(dk1)), 1e-6);
    EXPECT_LE(max_error(values(part(dv)), values(dv1)), 1e-6);
    at += n;
  }
  // Bad document starts: named with the entry and what it may be.
  const auto refuses = [&](std::vector<std::int32_t> bad, const std::string& what, ops::AttentionOptions o = {}) {
    o.document_starts = Tensor::from_vector<std::int32_t>(bad, {1, static_cast<std::int64_t>(bad.size())});
    const std::int64_t n = o.document_starts.size(1);
    try {
      ops::attention(ops::slice(q, 1, 0, n), ops::slice(k, 1, 0, n), ops::slice(v, 1, 0, n), o);
      ADD_FAILURE() << "accepted " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refuses({0, 0, 2, 1}, "document_starts[0, 3] = 1 is not a document start (expected 3 or 2");
  refuses({1, 1}, "document_starts[0, 0] = 1 is not a document start (expected 0");
  refuses({0, 0, 5}, "document_starts[0, 2] = 5 is not a document start");
  ops::AttentionOptions bidirectional;
  bidirectional.causal = false;
  refuses({0, 0}, "document_starts need causal self-attention", bidirectional);
}

TEST(AttentionKernel, KeyPaddingBf16DotProductPath) {
  if (!kernels::cpu::attention_uses_bf16_dot_products()) {
    GTEST_SKIP()
        << "built without AVX512-BF16: bf16 takes the f32-compute path (AttentionKernel.KeyPaddingMatchesNaive)";
  }
  const double tol = 1e-2, elem = 2e-2;
  compare_with_naive(padded({4, 131, 131, 4, 2, 32, false}), DType::bf16, tol, elem);
  compare_with_naive(padded({4, 131, 131, 4, 2, 32, true}), DType::bf16, tol, elem);
  compare_with_naive(padded({4, 70, 300, 6, 2, 16, true}, DType::i32), DType::bf16, tol, elem);  // S > T
  compare_with_naive(padded({4, 1, 257, 4, 1, 64, false}, DType::u8), DType::bf16, tol, elem);   // decoding
  compare_with_naive(padded({4, 129, 77, 4, 4, 8, false, true}), DType::bf16, tol, elem);        // mask
  compare_with_naive(padded({4, 150, 150, 2, 1, 40, true, false, 70}), DType::bf16, tol, elem);  // window
}

// A key mask of ones changes nothing (bit-identical to no key mask), and a
// padded sample gives exactly what the same sample gives alone with its padding
// keys hidden by an additive −inf mask.
TEST(AttentionKernel, KeyPaddingEqualsAdditiveMaskPerSample) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::mt19937_64 gen(13);
    const std::int64_t B = 4, T = 100, S = 140;
    Tensor q = random_f64(gen, {B, T, 2, 32}).to(dtype);
    Tensor k = random_f64(gen, {B, S, 2, 32}).to(dtype);
    Tensor v = random_f64(gen, {B, S, 2, 32}).to(dtype);
    Tensor dout = random_f64(gen, {B, T, 2, 32}).to(dtype);
    for (bool causal : {false, true}) {
      SCOPED_TRACE(causal ? "causal" : "not causal");
      ops::AttentionOptions none, ones, keyed;
      none.causal = ones.causal = keyed.causal = causal;
      ones.key_mask = Tensor::from_vector<std::int64_t>(std::vector<std::int64_t>(B * S, 1), {B, S}).to(DType::u8);
      keyed.key_mask = padded_keys(B, S, DType::i64);
      auto [o0, l0] = ops::attention(q, k, v, none);
      auto [o1, l1] = ops::attention(q, k, v, ones);
      auto [dq0, dk0, dv0] = ops::attention_backward(q, k, v, o0, l0, dout, none);
      auto [dq1, dk1, dv1] = ops::attention_backward(q, k, v, o1, l1, dout, ones);
      EXPECT_EQ(values(o0), values(o1));
      EXPECT_EQ(values(l0), values(l1));
      EXPECT_EQ(values(dq0), values(dq1));
      EXPECT_EQ(values(dk0), values(dk1));
      EXPECT_EQ(values(dv0), values(dv1));

      auto [out, lse] = ops::attention(q, k, v, keyed);
      auto [dq, dk, dv] = ops::attention_backward(q, k, v, out, lse, dout, keyed);
      const auto km = keyed.key_mask.to_vector<std::int64_t>();
      for (std::int64_t b = 0; b < B; ++b) {
        SCOPED_TRACE(fmt::format("sample {}", b));
        ops::AttentionOptions alone;
        alone.causal = causal;
        Tensor mask = Tensor::zeros({T, S}, DType::f64);
        auto m = mask.span<double>();
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t s = 0; s < S; ++s)
            if (km[static_cast<std::size_t>(b * S + s)] == 0) m[static_cast<std::size_t>(t * S + s)] = -kInf;
        alone.mask = mask.to(dtype);
        const auto one = [b](const Tensor& t) { return t.slice0(b, b + 1); };
        auto [ob, lb] = ops::attention(one(q), one(k), one(v), alone);
        auto [dqb, dkb, dvb] = ops::attention_backward(one(q), one(k), one(v), ob, lb, one(dout), alone);
        EXPECT_EQ(values(one(out)), values(ob));
        EXPECT_EQ(values(one(lse)), values(lb));
        EXPECT_EQ(values(one(dq)), values(dqb));
        EXPECT_EQ(values(one(dk)), values(dkb));
        EXPECT_EQ(values(one(dv)), values(dvb));
        // Padding keys get no gradient.
        const auto dkv = values(one(dk)), dvv = values(one(dv));
        for (std::int64_t s = 0; s < S; ++s) {
          if (km[static_cast<std::size_t>(b * S + s)] != 0) continue;
          for (std::int64_t j = 0; j < 2 * 32; ++j) {
            ASSERT_EQ(dkv[static_cast<std::size_t>(s * 64 + j)], 0.0) << "dk at padding key " << s;
            ASSERT_EQ(dvv[static_cast<std::size_t>(s * 64 + j)], 0.0) << "dv at padding key " << s;
          }
        }
      }
    }
  }
}

// A sample whose keys are all padding: zero output, lse −inf, zero and finite gradients, the other sample intact.
TEST(AttentionKernel, FullyPaddedSampleGivesZerosNotNaN) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(fmt::format("{} causal={}", dtype_name(dtype), causal));
      std::mt19937_64 gen(17);
      const std::int64_t T = 70, S = 90;
      autograd::Variable q(random_f64(gen, {2, T, 2, 16}).to(dtype), true);
      autograd::Variable k(random_f64(gen, {2, S, 1, 16}).to(dtype), true);
      autograd::Variable v(random_f64(gen, {2, S, 1, 16}).to(dtype), true);
      std::vector<std::int32_t> km(2 * S, 1);
      std::fill(km.begin() + S, km.end(), 0);  // sample 1: padding only
      ops::AttentionOptions options;
      options.causal = causal;
      options.key_mask = Tensor::from_vector<std::int32_t>(km, {2, S});
      autograd::Variable out = autograd::attention(q, k, v, options);
      const auto o = values(out.data());
      for (std::size_t i = o.size() / 2; i < o.size(); ++i) ASSERT_EQ(o[i], 0.0) << "out at " << i;
      double first_sample = 0;
      for (std::size_t i = 0; i < o.size() / 2; ++i) first_sample += std::abs(o[i]);
      EXPECT_GT(first_sample, 0.0);
      auto [unused, lse] = ops::attention(q.data(), k.data(), v.data(), options);
      const auto l = values(lse);
      for (std::size_t i = 0; i < l.size(); ++i) {
        if (i < l.size() / 2) {
          ASSERT_TRUE(std::isfinite(l[i])) << "lse at " << i;
        } else {
          ASSERT_EQ(l[i], -kInf) << "lse at " << i;
        }
      }
      autograd::sum(out).backward();
      for (const autograd::Variable* x : {&q, &k, &v}) {
        const auto g = values(x->grad());
        for (double e : g) ASSERT_TRUE(std::isfinite(e));
        for (std::size_t i = g.size() / 2; i < g.size(); ++i) ASSERT_EQ(g[i], 0.0);
      }
    }
  }
}

// Dropout on the probabilities across 64-key tiles, forward and backward against the naive attention with
// the same mask: causal and not, GQA, a KV cache, an additive mask, sliding windows, key padding; every dtype.
TEST(AttentionKernel, ProbabilityDropoutMatchesNaive) {
  compare_with_naive(dropped({1, 300, 300, 2, 2, 64, true}), DType::f64, 1e-12);
  compare_with_naive(dropped({1, 150, 150, 2, 2, 40, false}, 0.5), DType::f64, 1e-12);
  compare_with_naive(dropped({2, 131, 131, 4, 2, 32, true}), DType::f32, 2e-5);
  compare_with_naive(dropped({1, 70, 300, 6, 2, 16, true}), DType::f64, 1e-12);             // S > T (cache)
  compare_with_naive(dropped({1, 129, 77, 4, 4, 8, false, true}), DType::f64, 1e-12);       // additive mask
  compare_with_naive(dropped({1, 131, 131, 4, 2, 32, true, false, 37}), DType::f64, 1e-12);  // window
  compare_with_naive(dropped({1, 150, 150, 2, 2, 64, true, false, 1}), DType::f32, 2e-5);    // window 1
  compare_with_naive(dropped(padded({4, 150, 150, 2, 2, 32, false})), DType::f64, 1e-12);   // BERT: key padding
  compare_with_naive(dropped(padded({4, 131, 131, 4, 2, 32, true}, DType::u8)), DType::f32, 2e-5);
  compare_with_naive(dropped({1, 150, 150, 4, 2, 64, true}), DType::bf16, 2e-2);
  compare_with_naive(dropped(padded({4, 100, 100, 2, 2, 64, false})), DType::bf16, 2e-2);
  compare_with_naive(dropped({1, 150, 150, 2, 2, 64, true}), DType::f16, 5e-3);
}

TEST(AttentionKernel, ProbabilityDropoutBf16DotProductPath) {
  if (!kernels::cpu::attention_uses_bf16_dot_products()) {
    GTEST_SKIP() << "built without AVX512-BF16: bf16 takes the f32-compute path (ProbabilityDropoutMatchesNaive)";
  }
  const double tol = 1e-2, elem = 3e-2;
  compare_with_naive(dropped({2, 131, 131, 4, 2, 32, true}), DType::bf16, tol, elem);
  compare_with_naive(dropped(padded({4, 131, 131, 4, 2, 32, false})), DType::bf16, tol, elem);
  compare_with_naive(dropped({1, 70, 300, 6, 2, 16, true, false, 100}), DType::bf16, tol, elem);
}

// With every score equal (q = 0) each probability is 1/S, and with V the identity ([S, D = S]) out[t][s] is
// 1/S times the keep factor of key s: exactly 0 with probability p, else 1/((1 − p)·S). The rate of zeros is
// p within 5 standard deviations, the survivors carry exactly the scale, and the zeros are the generator's.
TEST(AttentionKernel, ProbabilityDropoutRateAndScale) {
  const std::int64_t B = 2, T = 96, S = 64, H = 4;
  for (const double p : {0.1, 0.5}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      SCOPED_TRACE(fmt::format("p={} {}", p, dtype_name(dtype)));
      Tensor q = Tensor::zeros({B, T, H, S}, dtype), k = Tensor::zeros({B, S, 1, S}, dtype);
      std::vector<double> eye(static_cast<std::size_t>(B * S * S), 0.0);
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t s = 0; s < S; ++s) eye[static_cast<std::size_t>((b * S + s) * S + s)] = 1.0;
      Tensor v = Tensor::from_vector<double>(eye, {B, S, 1, S}).to(dtype);
      ops::AttentionOptions options;
      options.causal = false;
      options.dropout = {p, kDropoutRng, 0, 0, 0};
      const auto out = values(ops::attention(q, k, v, options).first);
      const auto keep = dropout_keep(B, H, T, S, p, kDropoutRng, 0, 0, H);
      std::int64_t zeros = 0;
      const double survivor = 1.0 / ((1.0 - p) * static_cast<double>(S));
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t s = 0; s < S; ++s) {
              const double x = out[static_cast<std::size_t>(((b * T + t) * H + h) * S + s)];
              const bool kept = keep[static_cast<std::size_t>(((b * H + h) * T + t) * S + s)] != 0;
              ASSERT_EQ(x != 0, kept) << "b=" << b << " t=" << t << " h=" << h << " s=" << s;
              if (kept) {
                ASSERT_NEAR(x, survivor, 1e-6 * survivor);
              } else {
                ++zeros;
              }
            }
      const double n = static_cast<double>(B * T * H * S), rate = static_cast<double>(zeros) / n;
      EXPECT_NEAR(rate, p, 5 * std::sqrt(p * (1 - p) / n));
    }
  }
}

// A call holding some samples and heads of the layer (data and tensor parallelism) gives, bit for bit, the
// rows of the whole call: the mask is drawn at global coordinates. And p = 0 is the plain kernel.
TEST(AttentionKernel, ProbabilityDropoutOfAShardIsTheWholesRows) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::mt19937_64 gen(21);
    const std::int64_t B = 4, T = 100, H = 4, D = 32;
    Tensor q = random_f64(gen, {B, T, H, D}).to(dtype);
    Tensor k = random_f64(gen, {B, T, H, D}).to(dtype);
    Tensor v = random_f64(gen, {B, T, H, D}).to(dtype);
    Tensor dout = random_f64(gen, {B, T, H, D}).to(dtype);
    ops::AttentionOptions whole;
    whole.causal = false;
    whole.key_mask = padded_keys(B, T, DType::u8);
    whole.dropout = {0.3, kDropoutRng, 0, 0, 0};
    auto [out, lse] = ops::attention(q, k, v, whole);
    auto [dq, dk, dv] = ops::attention_backward(q, k, v, out, lse, dout, whole);
    // Samples 1..2, heads 2..3.
    const auto part = [](const Tensor& x) { return ops::slice(x.slice0(1, 3), 2, 2, 4); };
    ops::AttentionOptions shard = whole;
    shard.key_mask = whole.key_mask.slice0(1, 3);
    shard.dropout = {0.3, kDropoutRng, 1, 2, H};
    auto [o1, l1] = ops::attention(part(q), part(k), part(v), shard);
    auto [dq1, dk1, dv1] = ops::attention_backward(part(q), part(k), part(v), o1, l1, part(dout), shard);
    EXPECT_EQ(values(o1), values(part(out)));
    EXPECT_EQ(values(dq1), values(part(dq)));
    EXPECT_EQ(values(dk1), values(part(dk)));
    EXPECT_EQ(values(dv1), values(part(dv)));
    // The same call without the offsets draws another mask.
    shard.dropout = {0.3, kDropoutRng, 0, 0, 0};
    EXPECT_NE(values(ops::attention(part(q), part(k), part(v), shard).first), values(part(out)));
    // p = 0 is the kernel without dropout, bit for bit.
    ops::AttentionOptions off = whole, none = whole;
    off.dropout = {0.0, kDropoutRng, 1, 2, H + 2};
    none.dropout = {};
    EXPECT_EQ(values(ops::attention(q, k, v, off).first), values(ops::attention(q, k, v, none).first));
  }
}

TEST(AttentionKernel, ResultsDoNotDependOnThreadCount) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    std::mt19937_64 gen(7);
    Tensor q = random_f64(gen, {2, 200, 4, 64}).to(dtype);
    Tensor k = random_f64(gen, {2, 200, 2, 64}).to(dtype);
    Tensor v = random_f64(gen, {2, 200, 2, 64}).to(dtype);
    Tensor dout = random_f64(gen, {2, 200, 4, 64}).to(dtype);
    const int saved = num_threads();
    std::vector<std::vector<float>> runs[2];
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (std::int64_t window : {0, 70, -1, -2}) {  // -1: not causal, with a key-padding mask; -2: and dropout
        ops::AttentionOptions options;
        options.window = std::max<std::int64_t>(window, 0);
        if (window < 0) {
          options.causal = false;
          options.key_mask = padded_keys(2, 200, DType::u8);
        }
        if (window == -2) options.dropout = {0.1, kDropoutRng, 0, 0, 0};
        auto [out, lse] = ops::attention(q, k, v, options);
        auto [dq, dk, dv] = ops::attention_backward(q, k, v, out, lse, dout, options);
        for (const Tensor* t : {&out, &lse, &dq, &dk, &dv}) {
          runs[threads - 1].push_back(t->to(DType::f32).to_vector<float>());
        }
      }
    }
    set_num_threads(saved);
    for (std::size_t i = 0; i < runs[0].size(); ++i) {
      EXPECT_EQ(runs[0][i], runs[1][i]) << dtype_name(dtype) << " output " << i;
    }
  }
}

TEST(AttentionKernel, FullyMaskedRowGivesZerosNotNaN) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::mt19937_64 gen(11);
    const std::int64_t T = 70, S = 70;
    Tensor mask = Tensor::zeros({T, S}, DType::f32);
    auto m = mask.span<float>();
    for (std::int64_t s = 0; s < S; ++s) {
      m[static_cast<std::size_t>(3 * S + s)] = -std::numeric_limits<float>::infinity();
    }
    autograd::Variable q(random_f64(gen, {1, T, 2, 16}).to(dtype), true);
    autograd::Variable k(random_f64(gen, {1, S, 2, 16}).to(dtype), true);
    autograd::Variable v(random_f64(gen, {1, S, 2, 16}).to(dtype), true);
    ops::AttentionOptions options;
    options.mask = mask.to(dtype);
    autograd::Variable out = autograd::attention(q, k, v, options);
    auto o = out.data().to(DType::f32).to_vector<float>();
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t d = 0; d < 16; ++d) EXPECT_EQ(o[static_cast<std::size_t>((3 * 2 + h) * 16 + d)], 0.0f);
    auto [unused, lse] = ops::attention(q.data(), k.data(), v.data(), options);
    EXPECT_EQ(lse.to_vector<float>()[3], -std::numeric_limits<float>::infinity());
    autograd::sum(out).backward();
    for (const autograd::Variable* x : {&q, &k, &v})
      for (float g : x->grad().to(DType::f32).to_vector<float>()) ASSERT_TRUE(std::isfinite(g));
    auto dq = q.grad().to(DType::f32).to_vector<float>();
    for (std::int64_t d = 0; d < 32; ++d) EXPECT_EQ(dq[static_cast<std::size_t>(3 * 32 + d)], 0.0f);
  }
}

TEST(AttentionKernel, AutogradMatchesNaiveBackward) {
  std::mt19937_64 gen(5);
  const Problem p{1, 90, 90, 4, 2, 16, true};
  autograd::Variable q(random_f64(gen, {p.B, p.T, p.H, p.D}), true);
  autograd::Variable k(random_f64(gen, {p.B, p.S, p.Hkv, p.D}), true);
  autograd::Variable v(random_f64(gen, {p.B, p.S, p.Hkv, p.D}), true);
  Tensor dout = random_f64(gen, {p.B, p.T, p.H, p.D});
  autograd::attention(q, k, v).backward(dout);
  NaiveAttention naive{p.B, p.T, p.S, p.H, p.Hkv, p.D, p.causal, 0.25, {}};
  std::vector<double> rdq, rdk, rdv;
  naive.backward(values(q.data()), values(k.data()), values(v.data()), values(dout), rdq, rdk, rdv);
  EXPECT_LE(relative_error(values(q.grad()), rdq), 1e-12);
  EXPECT_LE(relative_error(values(k.grad()), rdk), 1e-12);
  EXPECT_LE(relative_error(values(v.grad()), rdv), 1e-12);
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "expected trident::Error";
  } catch (const Error& e) {
    for (const auto& s : fragments) EXPECT_NE(e.message().find(s), std::string::npos) << e.message();
  }
}

TEST(AttentionKernel, BadArgumentsNameTheOpAndShapes) {
  Tensor q = Tensor::zeros({1, 5, 3, 8}), k = Tensor::zeros({1, 7, 2, 8}), v = Tensor::zeros({1, 7, 2, 8});
  expect_error([&] { ops::attention(q, k, v); }, {"attention", "H = 3", "Hkv = 2", "[1, 5, 3, 8]", "[1, 7, 2, 8]"});
  Tensor q4 = Tensor::zeros({1, 5, 4, 8});
  expect_error([&] { ops::attention(q4, Tensor::zeros({1, 7, 2, 6}), Tensor::zeros({1, 7, 2, 6})); },
               {"attention", "[1, 5, 4, 8]", "[1, 7, 2, 6]"});
  expect_error([&] { ops::attention(q4, k, Tensor::zeros({1, 6, 2, 8})); }, {"attention", "[1, 7, 2, 8]", "[1, 6, 2, 8]"});
  expect_error([&] { ops::attention(Tensor::zeros({5, 4, 8}), k, v); }, {"attention", "[5, 4, 8]"});
  expect_error([&] { ops::attention(q4, k.to(DType::f64), v.to(DType::f64)); }, {"attention", "f32", "f64"});
  ops::AttentionOptions bad_mask;
  bad_mask.mask = Tensor::zeros({5, 6});
  expect_error([&] { ops::attention(q4, k, v, bad_mask); }, {"attention", "mask", "[5, 6]", "[5, 7]"});
  auto [out, lse] = ops::attention(q4, k, v);
  expect_error([&] { ops::attention_backward(q4, k, v, out, lse, Tensor::zeros({1, 5, 4, 7})); },
               {"attention_backward", "[1, 5, 4, 7]"});
  expect_error([&] { ops::attention_backward(q4, k, v, out, Tensor::zeros({1, 5, 4}), out); },
               {"attention_backward", "lse", "[1, 5, 4]", "[1, 4, 5]"});
  ops::AttentionOptions negative_window;
  negative_window.window = -3;
  expect_error([&] { ops::attention(q4, k, v, negative_window); }, {"attention", "window -3", ">= 0"});
  expect_error([&] { ops::attention_backward(q4, k, v, out, lse, out, negative_window); },
               {"attention_backward", "window -3"});
  ops::AttentionOptions window_not_causal;
  window_not_causal.window = 4;
  window_not_causal.causal = false;
  expect_error([&] { ops::attention(q4, k, v, window_not_causal); }, {"attention", "window 4", "causal"});
  ops::AttentionOptions bad_keys;
  bad_keys.key_mask = Tensor::zeros({1, 6}, DType::i64);
  expect_error([&] { ops::attention(q4, k, v, bad_keys); },
               {"attention", "key_mask", "[1, 6]", "[B, S] = [1, 7]", "[1, 5, 4, 8]", "[1, 7, 2, 8]"});
  bad_keys.key_mask = Tensor::zeros({7}, DType::i64);
  expect_error([&] { ops::attention(q4, k, v, bad_keys); }, {"attention", "key_mask", "[7]", "[B, S]"});
  bad_keys.key_mask = Tensor::zeros({1, 7}, DType::f32);
  expect_error([&] { ops::attention(q4, k, v, bad_keys); }, {"attention", "key_mask", "f32", "i64, i32 or u8"});
  expect_error([&] { ops::attention_backward(q4, k, v, out, lse, out, bad_keys); },
               {"attention_backward", "key_mask", "f32"});
  ops::AttentionOptions bad_dropout;
  for (double p : {1.0, -0.1, std::numeric_limits<double>::quiet_NaN()}) {
    bad_dropout.dropout.p = p;
    expect_error([&] { ops::attention(q4, k, v, bad_dropout); }, {"attention", "dropout p", "[0, 1)"});
  }
  expect_error([&] { ops::attention_backward(q4, k, v, out, lse, out, bad_dropout); },
               {"attention_backward", "dropout p"});
  bad_dropout.dropout = {0.1, CounterRng(1, 2), 0, 3, 6};
  expect_error([&] { ops::attention(q4, k, v, bad_dropout); },
               {"attention", "head_offset 3", "4 heads", "[1, 5, 4, 8]", "6 heads"});
}

}  // namespace
}  // namespace trident::testing
