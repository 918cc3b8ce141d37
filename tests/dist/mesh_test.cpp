#include "trident/dist/mesh.h"

#include <gtest/gtest.h>

#include "trident/core/error.h"

namespace trident::dist {
namespace {

using Groups = std::vector<std::vector<int>>;

// The seed's LiBai example: 8 ranks, dp = 2, tp = 2, pp = 2.
TEST(Mesh, EightRanksMatchLiBaiAndMegatron) {
  Mesh m(8, 2, 2, 2);
  EXPECT_EQ(m.groups(GroupKind::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.groups(GroupKind::dp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(m.groups(GroupKind::pp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.groups(GroupKind::model_parallel), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(m.groups(GroupKind::embedding), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.coords(5), (Coords{1, 0, 1}));
  for (int r = 0; r < 8; ++r) EXPECT_EQ(m.rank_of(m.coords(r)), r);
}

// The header's context-parallel example: cp sits beside tp (Megatron's tp-cp-ep-dp-pp); the gradients of
// the ranks holding the same parameters reduce over dp × cp.
TEST(Mesh, ContextParallelGroupsSitBesideTensorParallel) {
  const Mesh m(8, Layout{.tp = 2, .cp = 2});
  EXPECT_EQ(m.dp(), 2);
  EXPECT_EQ(m.groups(GroupKind::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.groups(GroupKind::cp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(m.groups(GroupKind::dp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.groups(GroupKind::dp_cp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(m.groups(GroupKind::expert_dp_cp), m.groups(GroupKind::dp_cp));  // ep = 1
  EXPECT_EQ(m.groups(GroupKind::model_parallel), m.groups(GroupKind::tp));    // tp × pp, cp apart
  EXPECT_EQ(m.coords(6), (Coords{0, 1, 0, 1}));
  EXPECT_EQ(m.describe(), "dp=2 × tp=2 × cp=2 × pp=1 (8 ranks)");
  for (int r = 0; r < 8; ++r) EXPECT_EQ(m.rank_of(m.coords(r)), r);
  // With experts: cp2 × dp4 (ep2); the experts' replicas reduce over expert-dp × cp.
  const Mesh e(8, Layout{.dp = 4, .ep = 2, .cp = 2});
  EXPECT_EQ(e.groups(GroupKind::cp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(e.groups(GroupKind::dp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(e.groups(GroupKind::ep), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(e.groups(GroupKind::expert_dp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(e.groups(GroupKind::dp_cp), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(e.groups(GroupKind::expert_dp_cp), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(e.describe(), "dp=4 (ep=2) × tp=1 × cp=2 × pp=1 (8 ranks)");
  // cp = 1: its groups are single ranks, and the gradients' groups are dp's and expert-dp's.
  const Mesh plain(8, 2, 2, 2);
  EXPECT_EQ(plain.groups(GroupKind::cp), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(plain.groups(GroupKind::dp_cp), plain.groups(GroupKind::dp));
  EXPECT_EQ(plain.groups(GroupKind::expert_dp_cp), plain.groups(GroupKind::expert_dp));
}

// The header's expert-parallel example: e consecutive data-parallel ranks share a layer's experts; every
// e-th holds the same experts (their gradients reduce there).
TEST(Mesh, ExpertParallelGroupsAreCarvedOutOfDataParallel) {
  Mesh m(8, 2, 1, 4, 2);
  EXPECT_EQ(m.groups(GroupKind::dp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(m.groups(GroupKind::ep), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(m.groups(GroupKind::expert_dp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.describe(), "dp=4 (ep=2) × tp=2 × pp=1 (8 ranks)");
  Mesh pipelined(8, 1, 2, 4, 4);  // ep = dp: one expert-parallel group per stage, no expert replicas
  EXPECT_EQ(pipelined.groups(GroupKind::ep), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(pipelined.groups(GroupKind::expert_dp), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  Mesh none(4, 1, 1);  // ep = 1: the expert-data-parallel group is the data-parallel group
  EXPECT_EQ(none.groups(GroupKind::expert_dp), none.groups(GroupKind::dp));
  EXPECT_EQ(none.groups(GroupKind::ep), (Groups{{0}, {1}, {2}, {3}}));
  try {
    Mesh(8, 2, 1, 4, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dist.expert_parallel_size=3 must divide the data-parallel size 4"),
              std::string::npos)
        << e.what();
  }
}

TEST(Mesh, InfersDataParallelSize) {
  Mesh m(12, 2, 3);
  EXPECT_EQ(m.dp(), 2);
  EXPECT_EQ(m.describe(), "dp=2 × tp=2 × pp=3 (12 ranks)");
  Mesh one(1, 1, 1);
  EXPECT_EQ(one.groups(GroupKind::embedding), (Groups{{0}}));
}

TEST(Mesh, BadLayoutsNameTheSizes) {
  try {
    Mesh(8, 3, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "dist.tensor_parallel_size must be a power of two, got 3");
  }
  try {
    Mesh(8, 2, 2, 4);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("4 × 2 × 2 = 16, but the job has 8 ranks"), std::string::npos) << e.message();
  }
  EXPECT_THROW(Mesh(6, 4, 1), Error);
}

}  // namespace
}  // namespace trident::dist
