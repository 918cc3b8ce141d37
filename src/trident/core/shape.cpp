#include "trident/core/shape.h"

#include "trident/core/error.h"

namespace trident {

std::size_t Shape::axis(std::int64_t i) const {
  const auto r = static_cast<std::int64_t>(dims_.size());
  TRIDENT_CHECK(i >= -r && i < r, "axis {} out of range for shape {}", i, to_string());
  return static_cast<std::size_t>(i < 0 ? i + r : i);
}

std::int64_t Shape::dim(std::int64_t i) const { return dims_[axis(i)]; }

std::int64_t Shape::numel() const noexcept {
  std::int64_t n = 1;
  for (auto d : dims_) n *= d;
  return n;
}

std::int64_t Shape::outer(std::size_t axis) const noexcept {
  std::int64_t n = 1;
  for (std::size_t i = 0; i < axis && i < dims_.size(); ++i) n *= dims_[i];
  return n;
}

std::int64_t Shape::inner(std::size_t axis) const noexcept {
  std::int64_t n = 1;
  for (std::size_t i = axis + 1; i < dims_.size(); ++i) n *= dims_[i];
  return n;
}

std::string Shape::to_string() const { return fmt::format("[{}]", fmt::join(dims_, ", ")); }

}  // namespace trident
