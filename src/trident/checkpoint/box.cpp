#include "trident/checkpoint/box.h"

#include "trident/core/error.h"

namespace trident::checkpoint {

void check_box(std::string_view file, std::string_view name, const Shape& shape,
               const std::vector<std::int64_t>& offsets, const Shape& box) {
  const std::size_t r = shape.rank();
  TRIDENT_CHECK(offsets.size() == r && box.rank() == r,
                "'{}': tensor '{}' has shape {}; cannot read a box of shape {} at {} offsets", file, name, shape, box,
                offsets.size());
  for (std::size_t d = 0; d < r; ++d) {
    TRIDENT_CHECK(offsets[d] >= 0 && box[d] >= 0 && box[d] <= shape[d] - offsets[d],  // cannot overflow
                  "'{}': box {} at offsets [{}] exceeds tensor '{}' of shape {}", file, box, fmt::join(offsets, ", "),
                  name, shape);
  }
}

}  // namespace trident::checkpoint
