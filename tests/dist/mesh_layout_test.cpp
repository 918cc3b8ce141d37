// dist::Layout and the generic group rule of dist::Mesh (mesh_test.cpp lists the groups of the worked
// examples): every group is the ranks that agree on the coordinates outside its dimensions, the sizes
// struct and the positional constructor give the same mesh, and context parallelism is refused until
// it is implemented.
#include <gtest/gtest.h>

#include "trident/core/error.h"
#include "trident/dist/mesh.h"

namespace trident::dist {
namespace {

// A group of kind k holds exactly the ranks whose coordinates outside k's dimensions equal the rank's.
TEST(MeshLayout, EveryGroupIsTheRanksAgreeingOutsideItsDimensions) {
  const Mesh m(16, Layout{.tp = 2, .pp = 2, .dp = 4, .ep = 2});
  for (const GroupInfo& info : kGroups) {
    if (info.ends_only) continue;
    for (int r = 0; r < 16; ++r) {
      std::vector<int> want;
      for (int s = 0; s < 16; ++s) {
        bool agree = true;
        for (int i = 0; i < kDimCount; ++i) {
          const auto d = static_cast<Dim>(i);
          if ((info.dims & dims(d)) == 0 && m.coord(s, d) != m.coord(r, d)) agree = false;
        }
        if (agree) want.push_back(s);
      }
      EXPECT_EQ(m.group(info.kind, r), want) << info.name << " of rank " << r;
    }
  }
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

TEST(MeshLayout, ContextParallelismIsRefusedUntilImplemented) {
  try {
    Mesh(4, Layout{.cp = 2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "dist: context parallelism (cp=2) is not implemented yet; its size must be 1");
  }
}

}  // namespace
}  // namespace trident::dist
