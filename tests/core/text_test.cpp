#include "trident/core/text.h"

#include <gtest/gtest.h>

namespace trident {
namespace {

TEST(EditDistance, EmptyAndEqual) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("train.steps", "train.steps"), 0u);
}

TEST(EditDistance, OneEditOfEachKind) {
  EXPECT_EQ(edit_distance("steps", "step"), 1u);    // deletion
  EXPECT_EQ(edit_distance("step", "steps"), 1u);    // insertion
  EXPECT_EQ(edit_distance("steps", "stops"), 1u);   // substitution
  EXPECT_EQ(edit_distance("trian", "train"), 2u);   // a swap is two edits
}

TEST(EditDistance, KnownPairsAndSymmetry) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("sitting", "kitten"), 3u);
  EXPECT_EQ(edit_distance("warmup", "arch"), 4u);
  EXPECT_EQ(edit_distance("flaw", "lawn"), 2u);
}

}  // namespace
}  // namespace trident
