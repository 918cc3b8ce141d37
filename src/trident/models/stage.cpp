#include "trident/models/stage.h"

#include <fmt/format.h>

#include <string>

#include "trident/core/error.h"

namespace trident::models {

std::vector<StageRange> partition_layers(std::int64_t n_layer, int stages, const std::vector<std::int64_t>& counts) {
  TRIDENT_CHECK(stages >= 1, "pipeline: {} stages", stages);
  std::vector<std::int64_t> per_stage = counts;
  // Every stage needs a layer: with fewer layers than stages no split exists to suggest.
  TRIDENT_CHECK(n_layer >= stages,
                "pipeline: {} layers cannot fill {} pipeline stages (each stage needs at least one layer): use at most "
                "{} stages (dist.pipeline_parallel_size × dist.virtual_pipeline_size)",
                n_layer, stages, n_layer);
  if (per_stage.empty()) {
    TRIDENT_CHECK(n_layer % stages == 0,
                  "pipeline: {} layers do not divide evenly over {} pipeline stages; give the layers of each stage in "
                  "dist.pipeline_num_layers (e.g. [{}])",
                  n_layer, stages, [&] {
                    std::string e;
                    for (int s = 0; s < stages; ++s)
                      e += fmt::format("{}{}", s ? ", " : "", n_layer / stages + (s < n_layer % stages ? 1 : 0));
                    return e;
                  }());
    per_stage.assign(static_cast<std::size_t>(stages), n_layer / stages);
  }
  TRIDENT_CHECK(static_cast<int>(per_stage.size()) == stages,
                "dist.pipeline_num_layers has {} entries for {} pipeline stages", per_stage.size(), stages);
  std::int64_t total = 0;
  for (std::int64_t c : per_stage) {
    TRIDENT_CHECK(c >= 1, "dist.pipeline_num_layers: every stage needs at least one layer, got {}", c);
    total += c;
  }
  TRIDENT_CHECK(total == n_layer, "dist.pipeline_num_layers sums to {} but the model has n_layer={}", total, n_layer);
  std::vector<StageRange> out;
  std::int64_t at = 0;
  for (int s = 0; s < stages; ++s) {
    const std::int64_t n = per_stage[static_cast<std::size_t>(s)];
    out.push_back(StageRange{at, at + n, s == 0, s == stages - 1});
    at += n;
  }
  return out;
}

}  // namespace trident::models
