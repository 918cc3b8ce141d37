// Attention over a sequence split by context parallelism (docs/parallelism.md#context-parallelism).
//
// Each rank of the cp group holds its two chunks of q, k and v (ChunkLayout): q [B, 2L, H, D] and k, v
// [B, 2L, Hkv, D]. context_attention returns this rank's rows of the attention over the whole sequence,
// exactly as ops::attention on the whole sequence would give them, and its backward this rank's rows of
// dq, dk and dv. Two algorithms:
//   ring        K/V blocks travel around the group (cp − 1 shifts, each overlapped with the attention of
//               the block at hand); each query half runs against each key half it sees, at their global
//               positions, and ops::attention_merge folds the partial (out, lse) into the running one.
//               The backward runs attention_backward pair by pair with the merged out and lse, so each
//               pair's gradients are blocks of the whole sequence's; dK/dV accumulators travel with the
//               blocks and arrive at their owners after cp shifts.
//   all_to_all  DeepSpeed-Ulysses: an all-to-all scatters the heads and gathers the sequence, so each rank
//               runs one whole-sequence attention over H/cp heads (and Hkv/cp key/value heads); another
//               brings the rows back. Needs H and Hkv divisible by cp.
// Causal and bidirectional attention, GQA, sliding windows, key padding, packed documents and dropout on
// the probabilities (drawn at global positions) are as in ops::attention. An additive mask is not
// supported.
#pragma once

#include <string>

#include "trident/autograd/variable.h"
#include "trident/dist/group.h"
#include "trident/ops/attention.h"
#include "trident/parallel/context/sequence.h"

namespace trident::parallel::context {

struct ContextAttention {
  dist::Group group;        // the cp group; its rank and size are layout.rank and layout.size
  bool all_to_all = false;  // false: the ring
  ChunkLayout layout;
  std::string site;  // the layer, for errors and a hang's message
};

// options: as for ops::attention on the whole sequence (causal, scale, window, dropout with the layer's
// batch and head offsets); key_mask and document_starts are whole [B, seq_len]; query_position,
// key_position and dropout.seq_len are set here.
autograd::Variable context_attention(const autograd::Variable& q, const autograd::Variable& k,
                                     const autograd::Variable& v, const ops::AttentionOptions& options,
                                     const ContextAttention& cp);

}  // namespace trident::parallel::context
