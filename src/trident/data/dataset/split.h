// Train/valid/test document ranges.
//
// parse_split follows Megatron's get_split_indices: a string such as
// "98,1,1" (or "98/1/1"; fewer than three parts are padded with 0) is
// normalised to fractions f, and split i covers documents
// [s_i, s_{i+1}) with s_{i+1} = s_i + round(f_i * N) (Python rounding, half to
// even), shifted so the last boundary is exactly N.
// weighted_range follows oslo's start/end weights: [round(b * N), round(e * N)).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace trident::data {

struct DocumentRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const noexcept { return end - begin; }
  bool operator==(const DocumentRange&) const = default;
};

std::array<DocumentRange, 3> parse_split(std::string_view split, std::int64_t documents);
DocumentRange weighted_range(std::int64_t documents, double begin_weight, double end_weight);

}  // namespace trident::data
