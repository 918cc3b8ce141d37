#include "trident/models/sparse_attention.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include <map>
#include <mutex>
#include <tuple>

#include "trident/core/error.h"
#include "trident/core/rng.h"
#include "trident/models/family.h"
#include "trident/nn/transformer.h"

namespace trident::models {

namespace {

using i64 = std::int64_t;

bool uses_attention_key(const std::string& mode) { return mode != "dense"; }

// Global groups [start, end) of variable and bslongformer: one block per index, or the ranges to the
// end indices; clipped at nb, and those starting at or past nb dropped (DeepSpeed's rule).
std::vector<std::pair<i64, i64>> global_groups(const SparseAttentionSpec& s, i64 nb) {
  std::vector<std::pair<i64, i64>> out;
  for (std::size_t i = 0; i < s.global_block_indices.size(); ++i) {
    const i64 start = s.global_block_indices[i];
    const i64 end = s.global_block_end_indices.empty() ? start + 1 : s.global_block_end_indices[i];
    if (start < nb) out.emplace_back(start, std::min(end, nb));
  }
  return out;
}

// One head's layout, [nb, nb] row-major.
class HeadLayout {
 public:
  explicit HeadLayout(i64 nb) : nb_(nb), cells_(static_cast<std::size_t>(nb * nb), 0) {}
  void set(i64 r, i64 c) { cells_[static_cast<std::size_t>(r * nb_ + c)] = 1; }
  // Columns [c0, c1) on rows [r0, r1).
  void fill(i64 r0, i64 r1, i64 c0, i64 c1) {
    for (i64 r = std::max<i64>(r0, 0); r < std::min(r1, nb_); ++r)
      for (i64 c = std::max<i64>(c0, 0); c < std::min(c1, nb_); ++c) set(r, c);
  }
  void lower_triangle() {
    for (i64 r = 0; r < nb_; ++r)
      for (i64 c = r + 1; c < nb_; ++c) cells_[static_cast<std::size_t>(r * nb_ + c)] = 0;
  }
  const std::vector<std::uint8_t>& cells() const { return cells_; }

 private:
  i64 nb_;
  std::vector<std::uint8_t> cells_;
};

// R distinct columns of [0, candidates) for row r of head h, uniform without replacement: the R smallest
// 64-bit keys drawn at (head, row, column) from the layout's stream.
std::vector<i64> random_columns(const SparseAttentionSpec& s, i64 h, i64 r, i64 candidates, i64 nb) {
  const CounterRng rng = CounterRng(static_cast<std::uint64_t>(s.seed), "sparse_attention/random_blocks")
                             .derive(fmt::format("head{}", h));
  std::vector<std::pair<std::uint64_t, i64>> keyed;
  for (i64 c = 0; c < candidates; ++c) {
    const auto at = static_cast<std::uint64_t>(2 * (r * nb + c));
    keyed.emplace_back((static_cast<std::uint64_t>(rng.bits(at)) << 32) | rng.bits(at + 1), c);
  }
  const auto R = static_cast<std::size_t>(s.num_random_blocks);
  std::partial_sort(keyed.begin(), keyed.begin() + static_cast<std::ptrdiff_t>(R), keyed.end());
  std::vector<i64> out;
  for (std::size_t i = 0; i < R; ++i) out.push_back(keyed[i].second);
  return out;
}

// Sparse Transformer's fixed pattern: local windows of L blocks, and in each window its pattern's G global
// blocks (columns; rows too with horizontal attention).
void fixed(const SparseAttentionSpec& s, i64 h, i64 nb, HeadLayout& out) {
  const bool uni = s.attention == "unidirectional";
  const i64 L = s.num_local_blocks, G = s.num_global_blocks;
  for (i64 start = 0; start < nb; start += L) {
    const i64 end = std::min(start + L, nb);
    for (i64 r = start; r < end; ++r) out.fill(r, r + 1, start, uni ? r + 1 : end);
  }
  const i64 f = L - (1 + h % s.num_different_global_patterns) * G;
  const auto global = [&](i64 i) {
    out.fill(uni ? i : 0, nb, i, i + G);  // columns [i, i + G): on every row, or from row i on
    if (s.horizontal_global_attention) out.fill(i, i + G, 0, nb);
  };
  const i64 full = nb - nb % L;
  for (i64 start = 0; start < full; start += L) global(start + f);
  if (nb % L != 0) global(std::min(full + f, nb - G));
}

void variable(const SparseAttentionSpec& s, i64 h, i64 nb, HeadLayout& out) {
  const bool uni = s.attention == "unidirectional";
  for (i64 r = 0; r < nb; ++r)
    for (i64 c : random_columns(s, h, r, nb, nb)) out.set(r, c);
  i64 start = 0;
  for (std::size_t w = 0; start < nb; ++w) {
    const i64 size = s.local_window_blocks[std::min(w, s.local_window_blocks.size() - 1)];
    const i64 end = std::min(start + size, nb);
    for (i64 r = start; r < end; ++r) out.fill(r, r + 1, start, uni ? r + 1 : end);
    start = end;
  }
  for (const auto& [g0, g1] : global_groups(s, nb)) {
    out.fill(uni ? g0 : 0, nb, g0, g1);
    if (s.horizontal_global_attention) out.fill(g0, g1, 0, nb);
  }
}

// The sliding window of bigbird and bslongformer: row r sees [r − w, r + w], w = W / 2.
void sliding_window(const SparseAttentionSpec& s, i64 nb, HeadLayout& out) {
  const i64 w = s.num_sliding_window_blocks / 2;
  for (i64 r = 0; r < nb; ++r) out.fill(r, r + 1, r - w, r + w + 1);
}

void bigbird(const SparseAttentionSpec& s, i64 h, i64 nb, HeadLayout& out) {
  const bool uni = s.attention == "unidirectional";
  for (i64 r = 0; r < nb; ++r)
    for (i64 c : random_columns(s, h, r, uni ? r + 1 : nb, nb)) out.set(r, c);
  sliding_window(s, nb, out);
  out.fill(0, s.num_global_blocks, 0, nb);
  out.fill(0, nb, 0, s.num_global_blocks);
  if (uni) out.lower_triangle();
}

void bslongformer(const SparseAttentionSpec& s, i64 nb, HeadLayout& out) {
  sliding_window(s, nb, out);
  for (const auto& [g0, g1] : global_groups(s, nb)) {
    out.fill(g0, g1, 0, nb);
    out.fill(0, nb, g0, g1);
  }
  if (s.attention == "unidirectional") out.lower_triangle();
}

}  // namespace

void validate_sparse_attention(const SparseAttentionSpec& s, i64 n_head, i64 max_seq_len) {
  if (!s.active()) return;
  const std::string& m = s.mode;
  TRIDENT_CHECK(m == "dense" || m == "fixed" || m == "variable" || m == "bigbird" || m == "bslongformer",
                "model.sparse_attention.mode='{}' is not one of dense, fixed, variable, bigbird, bslongformer", m);
  TRIDENT_CHECK(s.block >= 1, "model.sparse_attention.block must be positive, got {}", s.block);
  TRIDENT_CHECK(max_seq_len % s.block == 0,
                "model.sparse_attention.block={} must divide the sequence length {} (model.max_seq_len; DeepSpeed pads "
                "to a multiple of the block)",
                s.block, max_seq_len);
  const i64 nb = max_seq_len / s.block;
  TRIDENT_CHECK(!uses_attention_key(m) || s.attention == "bidirectional" || s.attention == "unidirectional",
                "model.sparse_attention.attention='{}' is not one of bidirectional, unidirectional", s.attention);
  TRIDENT_CHECK(!s.horizontal_global_attention || s.attention == "bidirectional",
                "model.sparse_attention.horizontal_global_attention needs attention = bidirectional");
  TRIDENT_CHECK(s.seed >= 0, "model.sparse_attention.seed must be >= 0, got {}", s.seed);
  if (m == "fixed") {
    const i64 L = s.num_local_blocks, G = s.num_global_blocks, P = s.num_different_global_patterns;
    TRIDENT_CHECK(L >= 1 && G >= 1 && L % G == 0,
                  "model.sparse_attention: num_local_blocks={} must be a positive multiple of num_global_blocks={}", L,
                  G);
    TRIDENT_CHECK(G <= nb, "model.sparse_attention.num_global_blocks={} exceeds the {} blocks of a sequence", G, nb);
    TRIDENT_CHECK(P >= 1 && P <= L / G,
                  "model.sparse_attention.num_different_global_patterns={} must be in [1, num_local_blocks / "
                  "num_global_blocks = {}]",
                  P, L / G);
    TRIDENT_CHECK(P == 1 || s.different_layout_per_head,
                  "model.sparse_attention.num_different_global_patterns={} needs different_layout_per_head = true", P);
  }
  if (m == "variable" || m == "bslongformer") {
    TRIDENT_CHECK(s.global_block_end_indices.empty() ||
                      s.global_block_end_indices.size() == s.global_block_indices.size(),
                  "model.sparse_attention: global_block_end_indices has {} entries for {} global_block_indices",
                  s.global_block_end_indices.size(), s.global_block_indices.size());
    for (std::size_t i = 0; i < s.global_block_indices.size(); ++i) {
      const i64 start = s.global_block_indices[i];
      TRIDENT_CHECK(start >= 0, "model.sparse_attention.global_block_indices[{}] = {} must be >= 0", i, start);
      TRIDENT_CHECK(s.global_block_end_indices.empty() || s.global_block_end_indices[i] > start,
                    "model.sparse_attention.global_block_end_indices[{}] = {} must be after its start {}", i,
                    s.global_block_end_indices[i], start);
    }
  }
  if (m == "variable") {
    TRIDENT_CHECK(!s.local_window_blocks.empty(), "model.sparse_attention.local_window_blocks is empty");
    for (std::size_t i = 0; i < s.local_window_blocks.size(); ++i)
      TRIDENT_CHECK(s.local_window_blocks[i] >= 1, "model.sparse_attention.local_window_blocks[{}] = {} must be >= 1",
                    i, s.local_window_blocks[i]);
  }
  if (m == "variable" || m == "bigbird") {
    const i64 R = s.num_random_blocks;
    TRIDENT_CHECK(R >= 0 && R <= nb, "model.sparse_attention.num_random_blocks={} must be in [0, {}] (the blocks of a "
                  "sequence)", R, nb);
    TRIDENT_CHECK(m != "bigbird" || s.attention != "unidirectional" || R <= 1,
                  "model.sparse_attention.num_random_blocks={} with attention = unidirectional: the first block row "
                  "has one block to draw from",
                  R);
  }
  if (m == "bigbird" || m == "bslongformer") {
    TRIDENT_CHECK(s.num_sliding_window_blocks >= 0 && s.num_sliding_window_blocks <= nb,
                  "model.sparse_attention.num_sliding_window_blocks={} must be in [0, {}] (the blocks of a sequence)",
                  s.num_sliding_window_blocks, nb);
  }
  if (m == "bigbird") {
    TRIDENT_CHECK(s.num_global_blocks >= 0 && s.num_global_blocks <= nb,
                  "model.sparse_attention.num_global_blocks={} must be in [0, {}] (the blocks of a sequence)",
                  s.num_global_blocks, nb);
  }
  (void)n_head;
}

Tensor block_layout(const SparseAttentionSpec& s, i64 n_head, i64 max_seq_len) {
  validate_sparse_attention(s, n_head, max_seq_len);
  TRIDENT_CHECK(s.active(), "block_layout: model.sparse_attention.mode is not set");
  const i64 nb = max_seq_len / s.block;
  const i64 heads = s.different_layout_per_head ? n_head : 1;
  Tensor out = Tensor::zeros({heads, nb, nb}, DType::u8);
  auto* dst = out.data<std::uint8_t>();
  for (i64 h = 0; h < heads; ++h) {
    HeadLayout head(nb);
    if (s.mode == "dense") {
      head.fill(0, nb, 0, nb);
    } else if (s.mode == "fixed") {
      fixed(s, h, nb, head);
    } else if (s.mode == "variable") {
      variable(s, h, nb, head);
    } else if (s.mode == "bigbird") {
      bigbird(s, h, nb, head);
    } else {
      bslongformer(s, nb, head);
    }
    std::copy(head.cells().begin(), head.cells().end(), dst + h * nb * nb);
  }
  return out;
}

double layout_density(const Tensor& layout, bool causal) {
  const i64 heads = layout.size(0), nb = layout.size(1);
  const auto* l = layout.data<std::uint8_t>();
  double kept = 0, total = 0;
  for (i64 h = 0; h < heads; ++h)
    for (i64 r = 0; r < nb; ++r)
      for (i64 c = 0; c < (causal ? r + 1 : nb); ++c) {
        total += 1;
        kept += l[(h * nb + r) * nb + c] != 0 ? 1 : 0;
      }
  return total > 0 ? kept / total : 0;
}

Tensor shared_block_layout(const TransformerSpec& spec) {
  const SparseAttentionSpec& s = spec.sparse_attention;
  // One layout per (spec, heads, length), shared by every layer, model and plan that asks for it.
  static std::mutex mutex;
  static std::vector<std::tuple<SparseAttentionSpec, std::int64_t, std::int64_t, Tensor>> built;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [key, heads, length, layout] : built)
    if (key == s && heads == spec.n_head && length == spec.max_seq_len) return layout;
  Tensor layout = block_layout(s, spec.n_head, spec.max_seq_len);
  built.emplace_back(s, spec.n_head, spec.max_seq_len, layout);
  return layout;
}

void set_sparse_attention(const TransformerSpec& spec, nn::SelfAttentionOptions& options) {
  if (!spec.sparse_attention.active()) return;
  options.block_layout = shared_block_layout(spec);
  options.block = spec.sparse_attention.block;
}

}  // namespace trident::models
