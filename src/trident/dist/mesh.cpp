#include "trident/dist/mesh.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "trident/core/error.h"

namespace trident::dist {

Mesh::Mesh(int world_size, int tp, int pp, int dp, int ep)
    : world_(world_size), tp_(tp), pp_(pp), dp_(dp), ep_(ep) {
  TRIDENT_CHECK(world_size >= 1, "dist: world size must be at least 1, got {}", world_size);
  TRIDENT_CHECK(tp >= 1 && (tp & (tp - 1)) == 0, "dist.tensor_parallel_size must be a power of two, got {}", tp);
  TRIDENT_CHECK(pp >= 1, "dist.pipeline_parallel_size must be at least 1, got {}", pp);
  TRIDENT_CHECK(world_size % (tp * pp) == 0,
                "dist: tensor_parallel_size × pipeline_parallel_size = {} × {} = {} does not divide the world size {}",
                tp, pp, tp * pp, world_size);
  if (dp_ == 0) dp_ = world_size / (tp * pp);
  TRIDENT_CHECK(dp_ * tp * pp == world_size,
                "dist: data_parallel_size × tensor_parallel_size × pipeline_parallel_size = {} × {} × {} = {}, but "
                "the job has {} ranks",
                dp_, tp, pp, dp_ * tp * pp, world_size);
  TRIDENT_CHECK(ep >= 1 && dp_ % ep == 0,
                "dist.expert_parallel_size={} must divide the data-parallel size {} (experts are split over "
                "data-parallel ranks)",
                ep, dp_);
}

Coords Mesh::coords(int rank) const {
  TRIDENT_CHECK(rank >= 0 && rank < world_, "dist: rank {} outside a world of {}", rank, world_);
  return Coords{rank / (tp_ * dp_), (rank / tp_) % dp_, rank % tp_};
}

int Mesh::rank_of(const Coords& c) const { return c.tp + tp_ * (c.dp + dp_ * c.pp); }

std::vector<int> Mesh::group(GroupKind kind, int rank) const {
  const Coords me = coords(rank);
  std::vector<int> out;
  switch (kind) {
    case GroupKind::tp:
      for (int t = 0; t < tp_; ++t) out.push_back(rank_of({me.pp, me.dp, t}));
      break;
    case GroupKind::dp:
      for (int d = 0; d < dp_; ++d) out.push_back(rank_of({me.pp, d, me.tp}));
      break;
    case GroupKind::pp:
      for (int p = 0; p < pp_; ++p) out.push_back(rank_of({p, me.dp, me.tp}));
      break;
    case GroupKind::model_parallel:
      for (int p = 0; p < pp_; ++p)
        for (int t = 0; t < tp_; ++t) out.push_back(rank_of({p, me.dp, t}));
      break;
    case GroupKind::embedding:
      // First and last pipeline stage of this rank's pipeline (one rank when pp = 1).
      out.push_back(rank_of({0, me.dp, me.tp}));
      if (pp_ > 1) out.push_back(rank_of({pp_ - 1, me.dp, me.tp}));
      break;
    case GroupKind::ep:
      for (int j = 0; j < ep_; ++j) out.push_back(rank_of({me.pp, me.dp / ep_ * ep_ + j, me.tp}));
      break;
    case GroupKind::expert_dp:
      for (int d = me.dp % ep_; d < dp_; d += ep_) out.push_back(rank_of({me.pp, d, me.tp}));
      break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<int>> Mesh::groups(GroupKind kind) const {
  std::set<std::vector<int>> seen;
  std::vector<std::vector<int>> out;
  for (int r = 0; r < world_; ++r) {
    auto g = group(kind, r);
    if (seen.insert(g).second) out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Mesh::describe() const {
  return fmt::format("dp={}{} × tp={} × pp={} ({} rank{})", dp_, ep_ > 1 ? fmt::format(" (ep={})", ep_) : "", tp_,
                     pp_, world_, world_ == 1 ? "" : "s");
}

}  // namespace trident::dist
