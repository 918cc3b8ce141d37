// dist::Layout and the generic group rule of dist::Mesh (mesh_test.cpp lists the groups of the worked
// examples): every group is the ranks that agree on the coordinates outside its dimensions, the sizes
// struct and the positional constructor give the same mesh, and context parallelism's sizes are checked.
#include <gtest/gtest.h>

#include "trident/core/error.h"
#include "trident/dist/mesh.h"

namespace trident::dist {
namespace {

// A group of kind k holds exactly the ranks whose coordinates outside k's dimensions equal the rank's.
void expect_groups_agree_outside_their_dimensions(const Mesh& m) {
  const int n = m.world_size();
  for (const GroupInfo& info : kGroups) {
    if (info.ends_only) continue;
    for (int r = 0; r < n; ++r) {
      std::vector<int> want;
      for (int s = 0; s < n; ++s) {
        bool agree = true;
        for (int i = 0; i < kDimCount; ++i) {
          const auto d = static_cast<Dim>(i);
          if ((info.dims & dims(d)) == 0 && m.coord(s, d) != m.coord(r, d)) agree = false;
        }
        if (agree) want.push_back(s);
      }
      EXPECT_EQ(m.group(info.kind, r), want) << info.name << " of rank " << r << " in " << m.describe();
    }
  }
}

TEST(MeshLayout, EveryGroupIsTheRanksAgreeingOutsideItsDimensions) {
  for (const Mesh& m : {Mesh(16, Layout{.tp = 2, .pp = 2, .dp = 4, .ep = 2}),
                        Mesh(32, Layout{.tp = 2, .pp = 2, .dp = 4, .ep = 2, .cp = 2}),
                        Mesh(24, Layout{.tp = 1, .pp = 2, .dp = 3, .cp = 4})}) {
    expect_groups_agree_outside_their_dimensions(m);
  }
  const Mesh m(16, Layout{.tp = 2, .pp = 2, .dp = 4, .ep = 2});
  EXPECT_EQ(m.size(Dim::expert_dp), 2);
  // 13 = tp 1 + 2·(ep 0 + 2·(expert_dp 1 + 2·pp 1)): dp = ep + e·expert_dp = 2.
  EXPECT_EQ(m.coords(13), (Coords{1, 2, 1}));
}

TEST(MeshLayout, TheSizesStructIsThePositionalConstructor) {
  const Mesh a(8, Layout{.tp = 2, .pp = 1, .ep = 2});
  const Mesh b(8, 2, 1, 0, 2);
  EXPECT_EQ(a.dp(), 4);
  EXPECT_EQ(a.layout().dp, 4);
  for (const GroupInfo& info : kGroups) EXPECT_EQ(a.groups(info.kind), b.groups(info.kind)) << info.name;
  EXPECT_EQ(a.describe(), b.describe());
}

// The partition Communicator::split takes: middle pipeline stages form embedding groups of their own.
TEST(MeshLayout, PartitionCoversEveryRank) {
  const Mesh m(4, Layout{.pp = 4});
  EXPECT_EQ(m.groups(GroupKind::embedding), (std::vector<std::vector<int>>{{0, 3}}));
  EXPECT_EQ(m.partition(GroupKind::embedding), (std::vector<std::vector<int>>{{0, 3}, {1}, {2}}));
  EXPECT_EQ(m.partition(GroupKind::dp), m.groups(GroupKind::dp));
}

TEST(MeshLayout, ContextParallelSizesAreChecked) {
  const auto refused = [](int world, const Layout& l, const std::string& message) {
    try {
      Mesh(world, l);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.message(), message);
    }
  };
  refused(4, Layout{.cp = 0}, "dist.context_parallel_size must be at least 1, got 0");
  refused(4, Layout{.tp = 2, .cp = 3},
          "dist: tensor_parallel_size × pipeline_parallel_size × context_parallel_size = 2 × 1 × 3 = 6 does not "
          "divide the world size 4");
  refused(8, Layout{.dp = 4, .cp = 4},
          "dist: data_parallel_size × tensor_parallel_size × pipeline_parallel_size × context_parallel_size = 4 × 1 "
          "× 1 × 4 = 16, but the job has 8 ranks");
  EXPECT_EQ(Mesh(8, Layout{.cp = 8}).dp(), 1);
}

}  // namespace
}  // namespace trident::dist
