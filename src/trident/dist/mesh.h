// The parallel layout, declared once: every dimension by name, the order that numbers the ranks, and
// every process group derived from that order. dist::Layout holds the sizes (train::Layout and the
// dist.*_size keys are it); dist::Mesh resolves them against a world size into rank ↔ coordinates and
// groups. Pure arithmetic: no processes are needed to use or test it.
//
// The order (Megatron's default, "tp-cp-ep-dp-pp"): a rank is a mixed-radix number whose digits are its
// coordinates, innermost first,
//   rank = tp + t·(cp + c·(ep + e·(expert_dp + (d/e)·pp)))
// Tensor parallelism is innermost (its ranks are neighbours), pipeline parallelism outermost. The
// data-parallel index is d = ep + e·expert_dp: expert parallelism (Megatron's) is carved out of the
// data-parallel ranks, e consecutive data-parallel ranks splitting each MoE layer's experts, and every
// e-th holding the same experts (their gradients reduce there). Context parallelism (cp: each rank holds
// 1/c of every sequence) sits beside tensor parallelism; its ranks hold the same parameters and different
// tokens, so dense gradients and ZeRO's shards reduce over data × context parallelism (dp-cp), and the
// experts' replicas over expert-dp × cp. dp itself stays "which samples": cp ranks read the same ones.
//
// A group of a set S of dimensions is the ranks that agree with a rank on every coordinate outside S.
// Each GroupKind is such a set (kGroups); the embedding group also keeps only the first and last
// pipeline stage.
//
// Worked example (8 ranks, t = 2, p = 2, d = 2; LiBai's and Megatron's layout):
//   TP [0,1] [2,3] [4,5] [6,7]   DP [0,2] [1,3] [4,6] [5,7]   PP [0,4] [1,5] [2,6] [3,7]
//   model-parallel (tp×pp) [0,1,4,5] [2,3,6,7]   embedding (first+last stage) = PP groups here
// Expert parallelism, 8 ranks, t = 2, p = 1, d = 4, e = 2:
//   DP [0,2,4,6] [1,3,5,7]   EP [0,2] [4,6] [1,3] [5,7]   expert-DP [0,4] [2,6] [1,5] [3,7]
// Context parallelism, 8 ranks, t = 2, c = 2, d = 2:
//   TP [0,1] [2,3] [4,5] [6,7]   CP [0,2] [1,3] [4,6] [5,7]   DP [0,4] [1,5] [2,6] [3,7]
//   DP-CP [0,2,4,6] [1,3,5,7]
#pragma once

#include <array>
#include <string>
#include <vector>

namespace trident::dist {

// The dimensions of the rank order, innermost first (the order of their digits in a rank).
enum class Dim { tp, cp, ep, expert_dp, pp };
inline constexpr int kDimCount = 5;

// A set of dimensions: bit i is Dim i.
using DimSet = unsigned;
constexpr DimSet dims(Dim d) { return 1u << static_cast<unsigned>(d); }
template <class... D>
constexpr DimSet dims(Dim d, D... more) {
  return dims(d) | dims(more...);
}

// The sizes of a layout, by name; world = dp · tp · pp · cp. The fields keep this order so that
// `Layout{tp, pp}` and `{.tp = 2, .pp = 2}` both read as they always have.
struct Layout {
  int tp = 1;  // tensor parallelism: a power of two
  int pp = 1;  // pipeline stages
  int dp = 0;  // data parallelism; 0 infers world / (tp · pp · cp)
  int ep = 1;  // expert parallelism, out of the data-parallel ranks (MoE models); divides dp
  int cp = 1;  // context parallelism: the ranks that split each sequence (training refuses cp > 1 until
               // it implements it: train::make_groups)
};

// The process groups of a layout.
enum class GroupKind { tp, dp, pp, model_parallel, embedding, ep, expert_dp, cp, dp_cp, expert_dp_cp };

struct GroupInfo {
  GroupKind kind;
  const char* name;  // the communicator's name (diagnostics, the flight recorder)
  DimSet dims;       // the dimensions along which its ranks differ
  bool ends_only;    // only the first and last coordinate along `dims` (the embedding group)
};

inline constexpr std::array<GroupInfo, 10> kGroups{{
    {GroupKind::tp, "tp", dims(Dim::tp), false},
    {GroupKind::dp, "dp", dims(Dim::ep, Dim::expert_dp), false},
    {GroupKind::pp, "pp", dims(Dim::pp), false},
    {GroupKind::model_parallel, "model-parallel", dims(Dim::tp, Dim::pp), false},
    // First and last stage of a pipeline (Megatron's embedding group: tied input and output embeddings).
    {GroupKind::embedding, "embedding", dims(Dim::pp), true},
    {GroupKind::ep, "ep", dims(Dim::ep), false},
    // The ranks holding the same experts; the data-parallel group when ep = 1.
    {GroupKind::expert_dp, "expert-dp", dims(Dim::expert_dp), false},
    // The ranks of one sequence (context parallelism); the gradients' groups of the ranks that hold the
    // same parameters: dense ones over dp × cp, the experts' over expert-dp × cp (the data-parallel and
    // expert-dp groups when cp = 1).
    {GroupKind::cp, "cp", dims(Dim::cp), false},
    {GroupKind::dp_cp, "dp-cp", dims(Dim::cp, Dim::ep, Dim::expert_dp), false},
    {GroupKind::expert_dp_cp, "expert-dp-cp", dims(Dim::cp, Dim::expert_dp), false},
}};

constexpr bool lists_every_kind_in_order() {
  for (std::size_t i = 0; i < kGroups.size(); ++i)
    if (kGroups[i].kind != static_cast<GroupKind>(i)) return false;
  return true;
}
static_assert(lists_every_kind_in_order(), "kGroups: one row per GroupKind, in the enum's order");
inline const GroupInfo& group_info(GroupKind kind) { return kGroups[static_cast<std::size_t>(kind)]; }

// A rank's coordinates by the names of the dist.* sizes (dp is the whole data-parallel index).
struct Coords {
  int pp = 0;
  int dp = 0;
  int tp = 0;
  int cp = 0;
  friend bool operator==(const Coords&, const Coords&) = default;
};

class Mesh {
 public:
  // Errors name the sizes: tp must be a power of two; tp · pp · cp · dp must equal world; ep must
  // divide dp; cp at least 1.
  Mesh(int world_size, const Layout& layout);
  Mesh(int world_size, int tp, int pp, int dp = 0, int ep = 1) : Mesh(world_size, Layout{tp, pp, dp, ep}) {}

  int world_size() const noexcept { return world_; }
  // The sizes, dp resolved.
  const Layout& layout() const noexcept { return layout_; }
  int tp() const noexcept { return layout_.tp; }
  int pp() const noexcept { return layout_.pp; }
  int dp() const noexcept { return layout_.dp; }
  int ep() const noexcept { return layout_.ep; }
  int cp() const noexcept { return layout_.cp; }
  int size(Dim d) const noexcept { return size_[static_cast<std::size_t>(d)]; }

  int coord(int rank, Dim d) const;
  Coords coords(int rank) const;
  int rank_of(const Coords& c) const;
  // The ranks of `rank`'s group of `kind`, ascending.
  std::vector<int> group(GroupKind kind, int rank) const;
  // Every group of `kind` (each once), ordered by their first rank.
  std::vector<std::vector<int>> groups(GroupKind kind) const;
  // groups(kind) plus a group of its own for each rank none of them holds (a middle pipeline stage's
  // embedding group): the partition of the world that Communicator::split takes.
  std::vector<std::vector<int>> partition(GroupKind kind) const;
  // "dp=2 × tp=2 × pp=2 (8 ranks)", "dp=4 (ep=2) × tp=2 × pp=1 (8 ranks)", "dp=2 × tp=2 × cp=2 × pp=1 (8 ranks)"
  std::string describe() const;

 private:
  int world_;
  Layout layout_;
  std::array<int, kDimCount> size_{};  // by Dim
};

}  // namespace trident::dist
