// A box of a tensor stored in a file — offsets and an extent per dimension, such as one rank's shard —
// as the readers' read_box take it (safetensors.h, torch_file.h).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "trident/core/shape.h"

namespace trident::checkpoint {

// Checks that the box of extent `box` at `offsets` lies inside tensor `name` of shape `shape` in `file`;
// the error names all of them.
void check_box(std::string_view file, std::string_view name, const Shape& shape,
               const std::vector<std::int64_t>& offsets, const Shape& box);

}  // namespace trident::checkpoint
