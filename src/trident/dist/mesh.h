// Mesh: the parallel layout as a value — rank ↔ (pp, dp, tp) coordinates and
// every process group, in Megatron's default order (tensor parallel innermost,
// then data, then pipeline): rank = tp + t·dp + t·d·pp.
//
// Worked example (8 ranks, t = 2, p = 2, d = 2; LiBai's and Megatron's layout):
//   TP [0,1] [2,3] [4,5] [6,7]   DP [0,2] [1,3] [4,6] [5,7]   PP [0,4] [1,5] [2,6] [3,7]
//   model-parallel (tp×pp) [0,1,4,5] [2,3,6,7]   embedding (first+last stage) = PP groups here
//
// Expert parallelism (Megatron's): the experts of each MoE layer are split over
// e ranks carved out of the data-parallel group. A data-parallel index d is
// (expert-data-parallel index d / e, expert-parallel index d % e): the
// expert-parallel group is e consecutive data-parallel ranks, and the
// expert-data-parallel group (where an expert's replicas reduce their
// gradients) is every e-th. 8 ranks, t = 2, p = 1, d = 4, e = 2:
//   DP [0,2,4,6] [1,3,5,7]   EP [0,2] [4,6] [1,3] [5,7]   expert-DP [0,4] [2,6] [1,5] [3,7]
// Pure arithmetic: no processes are needed to use or test it.
#pragma once

#include <string>
#include <vector>

namespace trident::dist {

struct Coords {
  int pp = 0;
  int dp = 0;
  int tp = 0;
  friend bool operator==(const Coords&, const Coords&) = default;
};

enum class GroupKind { tp, dp, pp, model_parallel, embedding, ep, expert_dp };

class Mesh {
 public:
  // dp = 0 infers the data-parallel size as world / (tp · pp), as oslo does.
  // Errors name the sizes: tp must be a power of two; tp · pp · dp must equal world; ep must divide dp.
  Mesh(int world_size, int tp, int pp, int dp = 0, int ep = 1);

  int world_size() const noexcept { return world_; }
  int tp() const noexcept { return tp_; }
  int pp() const noexcept { return pp_; }
  int dp() const noexcept { return dp_; }
  int ep() const noexcept { return ep_; }

  Coords coords(int rank) const;
  int rank_of(const Coords& c) const;
  // The ranks of `rank`'s group of `kind`, ascending.
  std::vector<int> group(GroupKind kind, int rank) const;
  // Every group of `kind` (each once), ordered by their first rank.
  std::vector<std::vector<int>> groups(GroupKind kind) const;
  std::string describe() const;  // "dp=2 × tp=2 × pp=2 (8 ranks)", "dp=4 (ep=2) × tp=2 × pp=1 (8 ranks)"

 private:
  int world_, tp_, pp_, dp_, ep_;
};

}  // namespace trident::dist
