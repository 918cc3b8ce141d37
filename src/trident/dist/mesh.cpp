#include "trident/dist/mesh.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "trident/core/error.h"

namespace trident::dist {

Mesh::Mesh(int world_size, const Layout& layout) : world_(world_size), layout_(layout) {
  const int tp = layout.tp, pp = layout.pp, ep = layout.ep, cp = layout.cp;
  TRIDENT_CHECK(world_size >= 1, "dist: world size must be at least 1, got {}", world_size);
  TRIDENT_CHECK(tp >= 1 && (tp & (tp - 1)) == 0, "dist.tensor_parallel_size must be a power of two, got {}", tp);
  TRIDENT_CHECK(pp >= 1, "dist.pipeline_parallel_size must be at least 1, got {}", pp);
  TRIDENT_CHECK(cp >= 1, "dist.context_parallel_size must be at least 1, got {}", cp);
  // Products in 64 bits: sizes near INT_MAX must not wrap around into a divisor.
  const long long model = static_cast<long long>(tp) * pp * cp;
  if (cp == 1) {
    TRIDENT_CHECK(world_size % model == 0,
                  "dist: tensor_parallel_size × pipeline_parallel_size = {} × {} = {} does not divide the world size {}",
                  tp, pp, model, world_size);
  } else {
    TRIDENT_CHECK(world_size % model == 0,
                  "dist: tensor_parallel_size × pipeline_parallel_size × context_parallel_size = {} × {} × {} = {} does "
                  "not divide the world size {}",
                  tp, pp, cp, model, world_size);
  }
  int& dp = layout_.dp;
  if (dp == 0) dp = static_cast<int>(world_size / model);
  TRIDENT_CHECK(dp * model == world_size,
                "dist: data_parallel_size × tensor_parallel_size × pipeline_parallel_size{} = {} × {} × {}{} = {}, but "
                "the job has {} ranks",
                cp > 1 ? " × context_parallel_size" : "", dp, tp, pp, cp > 1 ? fmt::format(" × {}", cp) : "",
                dp * model, world_size);
  TRIDENT_CHECK(ep >= 1 && dp % ep == 0,
                "dist.expert_parallel_size={} must divide the data-parallel size {} (experts are split over "
                "data-parallel ranks)",
                ep, dp);
  // The one place the named sizes become the digits of the rank order.
  size_[static_cast<std::size_t>(Dim::tp)] = tp;
  size_[static_cast<std::size_t>(Dim::cp)] = layout.cp;
  size_[static_cast<std::size_t>(Dim::ep)] = ep;
  size_[static_cast<std::size_t>(Dim::expert_dp)] = dp / ep;
  size_[static_cast<std::size_t>(Dim::pp)] = pp;
}

int Mesh::coord(int rank, Dim d) const {
  TRIDENT_CHECK(rank >= 0 && rank < world_, "dist: rank {} outside a world of {}", rank, world_);
  for (int i = 0; i < static_cast<int>(d); ++i) rank /= size_[static_cast<std::size_t>(i)];
  return rank % size(d);
}

Coords Mesh::coords(int rank) const {
  return Coords{coord(rank, Dim::pp), coord(rank, Dim::ep) + ep() * coord(rank, Dim::expert_dp), coord(rank, Dim::tp),
                coord(rank, Dim::cp)};
}

int Mesh::rank_of(const Coords& c) const {
  const std::array<int, kDimCount> digits{c.tp, c.cp, c.dp % ep(), c.dp / ep(), c.pp};  // in Dim order
  int rank = 0;
  for (int i = kDimCount - 1; i >= 0; --i) rank = rank * size_[static_cast<std::size_t>(i)] + digits[static_cast<std::size_t>(i)];
  return rank;
}

std::vector<int> Mesh::group(GroupKind kind, int rank) const {
  const GroupInfo& info = group_info(kind);
  // The rank's coordinates outside the group's dimensions stay; those along them take every value
  // (the first and last only, for ends_only).
  std::vector<int> out{rank};
  int stride = 1;
  for (int i = 0; i < kDimCount; ++i) {
    const auto d = static_cast<Dim>(i);
    const int n = size(d);
    if ((info.dims & dims(d)) != 0) {
      const int mine = coord(rank, d);
      std::vector<int> next;
      for (int r : out)
        for (int c = 0; c < n; ++c)
          if (!info.ends_only || c == 0 || c == n - 1) next.push_back(r + (c - mine) * stride);
      out = std::move(next);
    }
    stride *= n;
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

std::vector<std::vector<int>> Mesh::partition(GroupKind kind) const {
  std::vector<std::vector<int>> out = groups(kind);
  std::vector<bool> held(static_cast<std::size_t>(world_), false);
  for (const auto& g : out)
    for (int r : g) held[static_cast<std::size_t>(r)] = true;
  for (int r = 0; r < world_; ++r)
    if (!held[static_cast<std::size_t>(r)]) out.push_back({r});
  return out;
}

std::string Mesh::describe() const {
  return fmt::format("dp={}{} × tp={}{} × pp={} ({} rank{})", dp(), ep() > 1 ? fmt::format(" (ep={})", ep()) : "",
                     tp(), cp() > 1 ? fmt::format(" × cp={}", cp()) : "", pp(), world_, world_ == 1 ? "" : "s");
}

}  // namespace trident::dist
