#include "trident/models/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <random>

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

// The no_repeat_ngram guarantee under every combination of the other options:
// the token drawn never completes an n-gram already in the history.
TEST(Sampling, NeverEmitsABannedTokenWhateverTheOptions) {
  std::mt19937 gen(7);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  for (int trial = 0; trial < 4000; ++trial) {
    const std::size_t V = 2 + gen() % 12;
    std::vector<float> logits(V);
    for (float& x : logits) x = logit(gen);
    std::vector<std::int64_t> history(gen() % 20);
    for (auto& t : history) t = static_cast<std::int64_t>(gen() % V);
    SamplingOptions o;
    o.no_repeat_ngram = 1 + static_cast<std::int64_t>(gen() % 4);
    o.temperature = std::array<double, 4>{0.0, 0.01, 1.0, 50.0}[gen() % 4];
    o.top_k = static_cast<std::int64_t>(gen() % (V + 3));
    o.top_p = std::array<double, 4>{1.0, 0.9, 0.3, 1e-9}[gen() % 4];
    o.seed = gen();
    const auto banned = banned_tokens(history, o.no_repeat_ngram);
    if (banned.size() == V) continue;  // every token blocked: an error (BadOptionsAreErrors)
    const std::int64_t t = sample_next(logits, history, o, gen());
    ASSERT_TRUE(t >= 0 && t < static_cast<std::int64_t>(V));
    ASSERT_FALSE(std::binary_search(banned.begin(), banned.end(), t)) << "trial " << trial << " drew banned " << t;
  }
}

// A model whose output overflowed (NaN or +inf logits) is an error, not a
// draw: NaN made every probability NaN, no draw was ever below the running
// sum, and the fallback returned the last candidate — a token no_repeat_ngram
// had banned, or the least likely one.
TEST(Sampling, NonFiniteLogitsAreErrors) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  SamplingOptions o;
  o.no_repeat_ngram = 1;  // token 1 is in the history: banned
  for (double temperature : {1.0, 0.0}) {
    o.temperature = temperature;
    for (const std::vector<float>& logits : {std::vector<float>{nan, 5.0f, 1.0f}, std::vector<float>{inf, 5.0f, 1.0f},
                                             std::vector<float>{2.0f, 5.0f, nan}}) {
      try {
        const std::int64_t t = sample_next(logits, {1}, o, 0);
        ADD_FAILURE() << "temperature " << temperature << ": drew token " << t << " from non-finite logits";
      } catch (const Error& e) {
        EXPECT_NE(e.message().find("is not finite"), std::string::npos) << e.message();
      }
    }
  }
  // -inf is a masked token, not an error.
  o.temperature = 1.0;
  EXPECT_EQ(sample_next({-inf, 5.0f, 1.0f}, {1}, o, 0), 2);
}

TEST(Sampling, BadOptionsAreErrors) {
  SamplingOptions o;
  o.top_p = 0;
  EXPECT_THROW(sample_next({1.0f}, {}, o, 0), Error);
  o.top_p = 1;
  o.temperature = 0;
  o.no_repeat_ngram = 1;
  EXPECT_THROW(sample_next({1.0f}, {0}, o, 0), Error);
  // A negative n-gram size is not "off" (0 is): --no-repeat-ngram -1 was accepted silently.
  o.no_repeat_ngram = -1;
  EXPECT_THROW(sample_next({1.0f, 2.0f}, {0}, o, 0), Error);
}

}  // namespace
}  // namespace trident::models
