// How a model splits into pipeline stages.
#pragma once

#include <cstdint>
#include <vector>

namespace trident::models {

// The part of the model one pipeline stage (one model chunk) holds: blocks
// [first_layer, last_layer), the embeddings when it is the first stage, the
// final norm, LM head and loss when it is the last.
struct StageRange {
  std::int64_t first_layer = 0;
  std::int64_t last_layer = -1;  // -1: through the last layer
  bool embed = true;
  bool head = true;
};

// Layers over `stages` consecutive stages: evenly (n_layer must divide), or the
// explicit per-stage counts (`dist.pipeline_num_layers`, summing to n_layer).
// Errors name the sizes and the keys to set.
std::vector<StageRange> partition_layers(std::int64_t n_layer, int stages, const std::vector<std::int64_t>& counts = {});

}  // namespace trident::models
