// Shape: the extents of a contiguous row-major tensor, outermost first: Shape{batch, seq, hidden} has
// rank 3 and numel batch·seq·hidden; Shape{} is a scalar (rank 0, one element). A value type; extents are
// never negative once a tensor holds them (Tensor::view alone accepts one -1, meaning "the rest").
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace trident {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}

  std::size_t rank() const noexcept { return dims_.size(); }
  std::int64_t operator[](std::size_t i) const { return dims_[i]; }
  std::int64_t& operator[](std::size_t i) { return dims_[i]; }
  // Dimension with Python-style negative indexing (-1 = last); throws when out of range.
  std::int64_t dim(std::int64_t i) const;
  // Normalises a possibly negative axis against this rank; throws when out of range.
  std::size_t axis(std::int64_t i) const;
  std::int64_t numel() const noexcept;
  // Product of the dimensions before / after `axis`.
  std::int64_t outer(std::size_t axis) const noexcept;
  std::int64_t inner(std::size_t axis) const noexcept;
  std::int64_t last() const { return dim(-1); }

  const std::vector<std::int64_t>& dims() const noexcept { return dims_; }
  auto begin() const noexcept { return dims_.begin(); }
  auto end() const noexcept { return dims_.end(); }
  void push_back(std::int64_t d) { dims_.push_back(d); }

  std::string to_string() const;  // "[2, 3, 4]"
  friend bool operator==(const Shape&, const Shape&) = default;

 private:
  std::vector<std::int64_t> dims_;
};

}  // namespace trident

template <>
struct fmt::formatter<trident::Shape> : fmt::formatter<std::string_view> {
  auto format(const trident::Shape& s, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(s.to_string(), ctx);
  }
};
