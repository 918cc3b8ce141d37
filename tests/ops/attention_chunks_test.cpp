// Attention over chunks of a sequence (context parallelism's arithmetic, on one process): chunk pairs at
// their global positions, merged with ops::attention_merge, give the whole call's rows, and the pairs'
// backward through the merged out and lse gives its gradients; bad positions are refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attention_test_util.h"
#include "trident/core/error.h"
#include "trident/ops/attention.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/shape.h"

namespace trident::testing {
namespace {

// A sequence cut into chunks, each query chunk run against each key chunk at their global positions and
// the partial (out, lse) merged in order, gives the whole call's rows; attention_backward of each pair,
// given the merged out and lse, summed (dq over key chunks, dk and dv over query chunks), gives the whole
// call's gradients. With GQA, a sliding window, packed documents across chunk boundaries and dropout on
// the whole sequence's grid; f64, f32 and bf16 (merged in f32).
TEST(AttentionChunks, ChunkPairsMergeToTheWholeSequence) {
  for (DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const DType acc = dtype == DType::f64 ? DType::f64 : DType::f32;
    std::mt19937_64 gen(5);
    const std::int64_t B = 2, L = 148, H = 4, Hkv = 2, D = 16, chunk = 37;  // 4 chunks, across 64-key tiles
    Tensor q = random_f64(gen, {B, L, H, D}).to(dtype), k = random_f64(gen, {B, L, Hkv, D}).to(dtype);
    Tensor v = random_f64(gen, {B, L, Hkv, D}).to(dtype), dout = random_f64(gen, {B, L, H, D}).to(dtype);
    ops::AttentionOptions whole;
    whole.window = 50;
    whole.document_starts = packed_documents(B, L);  // sample 1: documents from 1, 64, 128 (chunk boundaries apart)
    whole.dropout = {0.2, kDropoutRng, 0, 0, 0, L};
    // The whole call, with its dropout on the same grid (positions 0 and 0 of a sequence of L).
    ops::AttentionOptions whole_positioned = whole;
    whole_positioned.query_position = whole_positioned.key_position = 0;
    auto [out, lse] = ops::attention(q, k, v, whole_positioned);
    auto [dq, dk, dv] = ops::attention_backward(q, k, v, out, lse, dout, whole_positioned);
    const auto rows = [&](const Tensor& t, std::int64_t from) { return ops::slice(t, 1, from, from + chunk); };
    const std::int64_t n = L / chunk;
    const auto pair_options = [&](std::int64_t qc, std::int64_t kc) {
      ops::AttentionOptions o = whole;
      o.query_position = qc * chunk;
      o.key_position = kc * chunk;
      o.document_starts = ops::slice(whole.document_starts, 1, qc * chunk, qc * chunk + chunk);
      return o;
    };
    const double fwd_tol = dtype == DType::f64 ? 1e-12 : (dtype == DType::f32 ? 1e-5 : 2e-2);
    std::vector<Tensor> merged_out, merged_lse;
    for (std::int64_t qc = 0; qc < n; ++qc) {
      Tensor acc_out = Tensor::zeros({B, chunk, H, D}, acc);
      Tensor acc_lse = Tensor::full({B, H, chunk}, -kInf, acc);
      for (std::int64_t kc = 0; kc < n; ++kc) {
        auto [o, l] =
            ops::attention(rows(q, qc * chunk), rows(k, kc * chunk), rows(v, kc * chunk), pair_options(qc, kc));
        ops::attention_merge(acc_out, acc_lse, o, l, 0);
      }
      EXPECT_LE(max_error(values(acc_out), values(rows(out, qc * chunk))), fwd_tol) << "out of query chunk " << qc;
      EXPECT_LE(max_error(values(acc_lse), values(ops::slice(lse, 2, qc * chunk, qc * chunk + chunk))), fwd_tol)
          << "lse of query chunk " << qc;
      merged_out.push_back(ops::cast(acc_out, dtype));
      merged_lse.push_back(acc_lse);
    }
    // The backward, pair by pair, through the merged out and lse.
    std::vector<Tensor> gq(static_cast<std::size_t>(n)), gk(static_cast<std::size_t>(n)),
        gv(static_cast<std::size_t>(n));
    const auto add = [](Tensor& into, const Tensor& x) {
      into = into.defined() ? ops::add(into, x.to(DType::f64)) : x.to(DType::f64);
    };
    for (std::int64_t qc = 0; qc < n; ++qc)
      for (std::int64_t kc = 0; kc < n; ++kc) {
        const auto c = static_cast<std::size_t>(qc);
        auto [pq, pk, pv] =
            ops::attention_backward(rows(q, qc * chunk), rows(k, kc * chunk), rows(v, kc * chunk), merged_out[c],
                                    merged_lse[c], rows(dout, qc * chunk), pair_options(qc, kc));
        add(gq[c], pq);
        add(gk[static_cast<std::size_t>(kc)], pk);
        add(gv[static_cast<std::size_t>(kc)], pv);
      }
    const double tol = dtype == DType::f64 ? 1e-11 : (dtype == DType::f32 ? 2e-5 : 3e-2);
    for (std::int64_t c = 0; c < n; ++c) {
      const auto i = static_cast<std::size_t>(c);
      EXPECT_LE(relative_error(values(gq[i]), values(rows(dq, c * chunk))), tol) << "dq " << c;
      EXPECT_LE(relative_error(values(gk[i]), values(rows(dk, c * chunk))), tol) << "dk " << c;
      EXPECT_LE(relative_error(values(gv[i]), values(rows(dv, c * chunk))), tol) << "dv " << c;
    }
  }
}

// Positions are both given or both −1, and a dropout grid needs them; chunk document starts may continue a
// document begun before the chunk but never one after its first query.
TEST(AttentionChunks, ChunkPositionsAreChecked) {
  std::mt19937_64 gen(3);
  Tensor q = random_f64(gen, {1, 4, 2, 8}), k = random_f64(gen, {1, 4, 2, 8}), v = random_f64(gen, {1, 4, 2, 8});
  const auto refuses = [&](const ops::AttentionOptions& o, const std::string& what) {
    try {
      ops::attention(q, k, v, o);
      ADD_FAILURE() << "accepted " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  ops::AttentionOptions one;
  one.query_position = 4;
  refuses(one, "query_position 4 and key_position -1 must both be positions (>= 0) or both -1");
  ops::AttentionOptions grid;
  grid.dropout = {0.1, kDropoutRng, 0, 0, 0, 16};
  refuses(grid, "dropout seq_len 16 needs q and k positioned within it");
  grid.query_position = 14;
  grid.key_position = 0;
  refuses(grid, "dropout seq_len 16 needs q and k positioned within it (query_position 14 + T 4");
  ops::AttentionOptions docs;
  docs.query_position = 8;
  docs.key_position = 4;
  docs.document_starts = Tensor::from_vector<std::int32_t>({9, 9, 9, 9}, {1, 4});
  refuses(docs, "document_starts[0, 0] = 9 is not a document start (expected 0 to 8");
  docs.document_starts = Tensor::from_vector<std::int32_t>({3, 3, 10, 10}, {1, 4});
  EXPECT_NO_THROW(ops::attention(q, k, v, docs));  // continues a document from 3, then opens one at 10
}

// The merge's argument errors name the op, the shapes and the rows.
TEST(AttentionChunks, MergeChecksItsArguments) {
  Tensor out = Tensor::zeros({1, 4, 2, 8}, DType::f32), lse = Tensor::full({1, 2, 4}, -kInf, DType::f32);
  Tensor part = Tensor::zeros({1, 2, 2, 8}, DType::f32), plse = Tensor::zeros({1, 2, 2}, DType::f32);
  const auto refuses = [&](Tensor o, Tensor l, Tensor p, Tensor pl, std::int64_t at, const std::string& what) {
    try {
      ops::attention_merge(o, l, p, pl, at);
      ADD_FAILURE() << "accepted " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refuses(out, lse, part, plse, 3, "attention_merge: rows [3, 5) of the part must lie within out's 4 rows");
  refuses(out, lse, Tensor::zeros({1, 2, 3, 8}, DType::f32), plse, 0, "must match out [1, 4, 2, 8] in B, H and D");
  refuses(out, Tensor::zeros({1, 2, 3}, DType::f32), part, plse, 0, "lse [1, 2, 3] and part_lse [1, 2, 2] must be");
  refuses(out.to(DType::bf16), lse, part.to(DType::bf16), plse, 0, "attention_merge");
  EXPECT_NO_THROW(ops::attention_merge(out, lse, part.to(DType::bf16), plse, 2));  // bf16 parts, f32 sums
}

}  // namespace
}  // namespace trident::testing
