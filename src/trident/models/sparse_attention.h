// Block-sparse attention layouts: DeepSpeed's sparse_attention modes (docs/sparse-attention.md; the
// specification with DeepSpeed's sources is docs/plans/block-sparse-attention.md).
//
// A layout says, per head, which blocks of `block` keys each block of `block` queries attends to: a 0/1
// tensor [heads, nb, nb] over nb = max_seq_len / block blocks. It is built once for the model's
// max_seq_len; a shorter sequence uses its top-left corner (as DeepSpeed does). Every layer uses the same
// layout. Random blocks (variable, bigbird) are drawn from the counter-based generator keyed by
// (seed, head, row, column), so every rank builds the same layout without exchanging it.
//
// Inside a selected block every pair is a candidate, and the attention's own rules apply on top: under a
// causal model query t never sees a key after it (DeepSpeed leaves that to an attention mask the model
// passes), and padding keys stay hidden.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trident/core/tensor.h"

namespace trident::models {

struct SparseAttentionSpec {
  // "" (off: dense attention), or DeepSpeed's mode: dense, fixed, variable, bigbird, bslongformer.
  std::string mode;
  std::int64_t block = 16;                      // tokens per block; divides the sequence
  bool different_layout_per_head = false;       // else head 0's layout for every head
  std::int64_t num_local_blocks = 4;            // fixed: the local window, in blocks
  std::int64_t num_global_blocks = 1;           // fixed, bigbird
  std::string attention = "bidirectional";      // fixed, variable, bigbird, bslongformer: or "unidirectional"
  bool horizontal_global_attention = false;     // fixed, variable: global blocks' rows see every block too
  std::int64_t num_different_global_patterns = 1;  // fixed, with different_layout_per_head
  std::int64_t num_random_blocks = 0;           // variable, bigbird: per block row
  std::vector<std::int64_t> local_window_blocks = {4};   // variable: window sizes, the last repeating
  std::vector<std::int64_t> global_block_indices = {0};  // variable, bslongformer
  std::vector<std::int64_t> global_block_end_indices = {};  // variable, bslongformer: ranges' ends (empty: one block each)
  std::int64_t num_sliding_window_blocks = 3;   // bigbird, bslongformer
  std::int64_t seed = 0;                        // the random blocks' stream

  bool active() const noexcept { return !mode.empty(); }
  bool operator==(const SparseAttentionSpec&) const = default;
};

// Throws one line naming the model.sparse_attention key and the value expected, for a model of n_head
// heads whose sequences are at most max_seq_len tokens.
void validate_sparse_attention(const SparseAttentionSpec& s, std::int64_t n_head, std::int64_t max_seq_len);

// The layout, u8 [heads, nb, nb] on the host: heads = n_head with different_layout_per_head, else 1;
// nb = max_seq_len / block. Validates first.
Tensor block_layout(const SparseAttentionSpec& s, std::int64_t n_head, std::int64_t max_seq_len);

// The fraction of (query block, key block) pairs a layout keeps, over its heads; with `causal`, of the
// pairs on or below the diagonal (what a causal dense attention computes).
double layout_density(const Tensor& layout, bool causal);

}  // namespace trident::models
