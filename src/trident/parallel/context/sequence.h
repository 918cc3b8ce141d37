// Context parallelism's split of a sequence (docs/parallelism.md#context-parallelism): the cp ranks of a
// group each hold 2 of its 2·cp equal chunks, chunk r and its mirror 2·cp − 1 − r, so that under a causal
// mask every rank does the same attention work (Megatron-core's load balance). Rank r's local tokens are
// chunk r followed by chunk 2·cp − 1 − r; everything outside attention (embeddings, norms, MLPs, the loss)
// runs on them as on any sequence, with their global positions.
#pragma once

#include <cstdint>
#include <vector>

#include "trident/core/tensor.h"

namespace trident::parallel::context {

struct ChunkLayout {
  int rank = 0;
  int size = 1;              // 1: no context parallelism (the local sequence is the whole one)
  std::int64_t seq_len = 0;  // the whole sequence's length, a multiple of 2·size

  bool active() const noexcept { return size > 1; }
  // Tokens per chunk (seq_len / (2·size)) and per rank (two chunks).
  std::int64_t chunk() const noexcept { return seq_len / (2 * size); }
  std::int64_t local_len() const noexcept { return seq_len / size; }
  // The global position of local token `local`; of the first token of this rank's chunk `half` (0 or 1).
  std::int64_t global_position(std::int64_t local) const noexcept;
  std::int64_t half_position(int half) const noexcept;

  // Local tokens [from, from + count) as runs of consecutive global positions: one run, or two when the
  // range crosses from chunk r into its mirror.
  struct Run {
    std::int64_t local_begin, global_begin, length;
  };
  std::vector<Run> runs(std::int64_t from, std::int64_t count) const;
  // Their global positions, i64 [count] on the host.
  Tensor positions(std::int64_t from, std::int64_t count) const;

  // This rank's tokens of a whole sequence along `dim` (whole.size(dim) == seq_len): its two chunks,
  // concatenated. Inactive: `whole` itself.
  Tensor take(const Tensor& whole, std::int64_t dim) const;
};

}  // namespace trident::parallel::context
