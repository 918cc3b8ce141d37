#include "trident/models/sampling.h"

#include <gtest/gtest.h>

#include <map>

#include "trident/core/error.h"

namespace trident::models {
namespace {

TEST(Sampling, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingOptions o;
  o.temperature = 0;
  EXPECT_EQ(sample_next({0.1f, 2.0f, 2.0f, -1.0f}, {}, o, 0), 1);
}

TEST(Sampling, NoRepeatNgramBansCompletions) {
  // History "1 2 3 1 2": with n = 3 the prefix (1, 2) was followed by 3 → 3 banned.
  EXPECT_EQ(banned_tokens({1, 2, 3, 1, 2}, 3), (std::vector<std::int64_t>{3}));
  // n = 2: prefix (2) was followed by 3 → banned 3.
  EXPECT_EQ(banned_tokens({1, 2, 3, 1, 2}, 2), (std::vector<std::int64_t>{3}));
  // n = 1: every token seen is banned.
  EXPECT_EQ(banned_tokens({4, 1, 4}, 1), (std::vector<std::int64_t>{1, 4}));
  EXPECT_TRUE(banned_tokens({1, 2}, 4).empty());
  SamplingOptions o;
  o.temperature = 0;
  o.no_repeat_ngram = 3;
  EXPECT_EQ(sample_next({0, 0, 0, 5.0f, 4.0f}, {1, 2, 3, 1, 2}, o, 0), 4);
}

TEST(Sampling, TopKAndTopPRestrictTheSupport) {
  const std::vector<float> logits = {3.0f, 2.9f, 0.0f, -1.0f, 2.8f};
  SamplingOptions k;
  k.top_k = 2;
  SamplingOptions p;
  p.top_p = 0.5;  // the top token alone has ~36 % mass; top two reach the threshold
  std::map<std::int64_t, int> seen_k, seen_p;
  for (std::uint64_t i = 0; i < 2000; ++i) {
    k.seed = p.seed = 5;
    ++seen_k[sample_next(logits, {}, k, i)];
    ++seen_p[sample_next(logits, {}, p, i)];
  }
  EXPECT_EQ(seen_k.size(), 2u);
  EXPECT_TRUE(seen_k.count(0) && seen_k.count(1));
  EXPECT_EQ(seen_p.size(), 2u);
  EXPECT_TRUE(seen_p.count(0) && seen_p.count(1));
}

TEST(Sampling, TemperatureSamplingFollowsTheDistribution) {
  SamplingOptions o;
  o.seed = 1;
  std::map<std::int64_t, int> seen;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++seen[sample_next({0.0f, std::log(3.0f)}, {}, o, static_cast<std::uint64_t>(i))];
  EXPECT_NEAR(seen[1] / double(n), 0.75, 0.015);
  // Same seed and index → same token.
  EXPECT_EQ(sample_next({0.0f, 0.1f, 0.2f}, {}, o, 7), sample_next({0.0f, 0.1f, 0.2f}, {}, o, 7));
}

TEST(Sampling, BadOptionsAreErrors) {
  SamplingOptions o;
  o.top_p = 0;
  EXPECT_THROW(sample_next({1.0f}, {}, o, 0), Error);
  o.top_p = 1;
  o.temperature = 0;
  o.no_repeat_ngram = 1;
  EXPECT_THROW(sample_next({1.0f}, {0}, o, 0), Error);
}

}  // namespace
}  // namespace trident::models
