#include "trident/models/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "trident/core/error.h"

namespace trident::models {

std::vector<std::int64_t> banned_tokens(const std::vector<std::int64_t>& history, std::int64_t n) {
  std::vector<std::int64_t> banned;
  const auto len = static_cast<std::int64_t>(history.size());
  if (n <= 0 || len + 1 < n) return banned;
  // The last n-1 tokens form the prefix; every earlier occurrence of that prefix bans its successor.
  const std::int64_t prefix_start = len - (n - 1);
  for (std::int64_t i = 0; i + n <= len; ++i) {
    bool match = true;
    for (std::int64_t j = 0; j < n - 1 && match; ++j) {
      match = history[static_cast<std::size_t>(i + j)] == history[static_cast<std::size_t>(prefix_start + j)];
    }
    if (match) banned.push_back(history[static_cast<std::size_t>(i + n - 1)]);
  }
  std::sort(banned.begin(), banned.end());
  banned.erase(std::unique(banned.begin(), banned.end()), banned.end());
  return banned;
}

std::int64_t sample_next(const std::vector<float>& logits, const std::vector<std::int64_t>& history,
                         const SamplingOptions& o, std::uint64_t draw_index) {
  TRIDENT_CHECK(!logits.empty(), "sample_next: empty logits");
  TRIDENT_CHECK(o.temperature >= 0, "sampling: temperature must be >= 0, got {}", o.temperature);
  TRIDENT_CHECK(o.top_p > 0 && o.top_p <= 1, "sampling: top_p must be in (0, 1], got {}", o.top_p);
  TRIDENT_CHECK(o.top_k >= 0, "sampling: top_k must be >= 0, got {}", o.top_k);
  TRIDENT_CHECK(o.no_repeat_ngram >= 0, "sampling: no_repeat_ngram must be >= 0 (0 = off), got {}", o.no_repeat_ngram);
  std::vector<double> z(logits.begin(), logits.end());
  const double kNegInf = -std::numeric_limits<double>::infinity();
  // -inf masks a token; NaN or +inf (an overflowed model) would make every
  // probability NaN, and the draw would fall through to the last candidate.
  for (std::size_t t = 0; t < z.size(); ++t) {
    TRIDENT_CHECK(!std::isnan(z[t]) && z[t] != -kNegInf,
                  "sampling: the logit of token {} is not finite ({}); the model's output overflowed", t, z[t]);
  }
  for (std::int64_t t : banned_tokens(history, o.no_repeat_ngram)) {
    if (t >= 0 && t < static_cast<std::int64_t>(z.size())) z[static_cast<std::size_t>(t)] = kNegInf;
  }
  std::vector<std::size_t> order(z.size());
  std::iota(order.begin(), order.end(), 0);
  // Highest logit first; ties broken by the lower token id (deterministic).
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return z[a] > z[b]; });
  TRIDENT_CHECK(z[order[0]] != kNegInf, "sampling: every token is blocked by no_repeat_ngram={}", o.no_repeat_ngram);
  if (o.temperature == 0) return static_cast<std::int64_t>(order[0]);

  std::size_t keep = z.size();
  if (o.top_k > 0) keep = std::min<std::size_t>(keep, static_cast<std::size_t>(o.top_k));
  const double mx = z[order[0]];
  std::vector<double> p(keep);
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    p[i] = z[order[i]] == kNegInf ? 0.0 : std::exp((z[order[i]] - mx) / o.temperature);
    total += p[i];
  }
  if (o.top_p < 1) {
    // Smallest prefix whose probability mass reaches top_p (at least one token).
    double mass = 0;
    std::size_t cut = 0;
    while (cut < keep) {
      mass += p[cut] / total;
      ++cut;
      if (mass >= o.top_p) break;
    }
    keep = cut;
    total = 0;
    for (std::size_t i = 0; i < keep; ++i) total += p[i];
  }
  const double u = CounterRng(o.seed, "generate/sample").uniform(draw_index) * total;
  double acc = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return static_cast<std::int64_t>(order[i]);
  }
  return static_cast<std::int64_t>(order[keep - 1]);
}

}  // namespace trident::models
