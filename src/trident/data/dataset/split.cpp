#include "trident/data/dataset/split.h"

#include <cmath>
#include <string>
#include <vector>

#include "trident/core/error.h"

namespace trident::data {

std::array<DocumentRange, 3> parse_split(std::string_view split, std::int64_t documents) {
  TRIDENT_CHECK(documents >= 0, "negative document count {}", documents);
  const char sep = split.find(',') != std::string_view::npos ? ',' : '/';
  std::vector<double> parts;
  std::size_t pos = 0;
  while (true) {
    const std::size_t end = split.find(sep, pos);
    const std::string item(split.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
    std::size_t used = 0;
    double v = -1;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TRIDENT_CHECK(used == item.size() && !item.empty() && std::isfinite(v) && v >= 0,
                  "split '{}': '{}' is not a non-negative number (expected e.g. \"98,1,1\")", split, item);
    parts.push_back(v);
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  TRIDENT_CHECK(parts.size() <= 3, "split '{}' has {} parts, expected at most 3 (train, valid, test)", split,
                parts.size());
  while (parts.size() < 3) parts.push_back(0.0);
  double total = 0;
  for (double p : parts) total += p;
  TRIDENT_CHECK(total > 0, "split '{}' sums to 0", split);
  std::array<std::int64_t, 4> idx{0, 0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    // std::nearbyint rounds half to even under the default rounding mode, like Python's round().
    idx[i + 1] = idx[i] + static_cast<std::int64_t>(std::nearbyint(parts[i] / total * static_cast<double>(documents)));
  }
  const std::int64_t diff = idx[3] - documents;
  for (int i = 1; i < 4; ++i) idx[i] -= diff;
  std::array<DocumentRange, 3> out;
  for (int i = 0; i < 3; ++i) out[i] = {idx[i], idx[i + 1]};
  return out;
}

DocumentRange weighted_range(std::int64_t documents, double begin_weight, double end_weight) {
  TRIDENT_CHECK(0 <= begin_weight && begin_weight <= end_weight && end_weight <= 1,
                "start/end weights ({}, {}) must satisfy 0 <= start <= end <= 1", begin_weight, end_weight);
  const auto n = static_cast<double>(documents);
  return {static_cast<std::int64_t>(std::nearbyint(begin_weight * n)),
          static_cast<std::int64_t>(std::nearbyint(end_weight * n))};
}

}  // namespace trident::data
