#include "trident/parallel/context/sequence.h"

#include "trident/core/error.h"
#include "trident/ops/shape.h"

namespace trident::parallel::context {

std::int64_t ChunkLayout::half_position(int half) const noexcept {
  return half == 0 ? rank * chunk() : (2 * size - 1 - rank) * chunk();
}

std::int64_t ChunkLayout::global_position(std::int64_t local) const noexcept {
  if (!active()) return local;
  const std::int64_t L = chunk();
  return local < L ? half_position(0) + local : half_position(1) + (local - L);
}

std::vector<ChunkLayout::Run> ChunkLayout::runs(std::int64_t from, std::int64_t count) const {
  if (count <= 0) return {};
  if (!active()) return {Run{from, from, count}};
  const std::int64_t L = chunk();
  TRIDENT_CHECK(from >= 0 && from + count <= 2 * L,
                "context parallelism: local tokens [{}, {}) are not within this rank's {} tokens", from, from + count,
                2 * L);
  std::vector<Run> out;
  if (from < L) out.push_back({from, global_position(from), std::min(count, L - from)});
  if (from + count > L) {
    const std::int64_t begin = std::max(from, L);
    out.push_back({begin, global_position(begin), from + count - begin});
  }
  return out;
}

Tensor ChunkLayout::positions(std::int64_t from, std::int64_t count) const {
  Tensor p = Tensor::empty({count}, DType::i64);
  auto* d = p.data<std::int64_t>();
  for (std::int64_t i = 0; i < count; ++i) d[i] = global_position(from + i);
  return p;
}

Tensor ChunkLayout::take(const Tensor& whole, std::int64_t dim) const {
  if (!active()) return whole;
  TRIDENT_CHECK(dim >= 0 && dim < static_cast<std::int64_t>(whole.rank()) && whole.size(dim) == seq_len,
                "context parallelism: dimension {} of {} must be the sequence of {} tokens", dim, whole.shape(),
                seq_len);
  const std::int64_t L = chunk();
  return ops::concat({ops::slice(whole, dim, half_position(0), half_position(0) + L),
                      ops::slice(whole, dim, half_position(1), half_position(1) + L)},
                     dim);
}

}  // namespace trident::parallel::context
