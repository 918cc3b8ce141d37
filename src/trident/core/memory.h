// Memory accounting: current and peak bytes per device, split by category.
//
// Every Storage allocation is charged to the category that is current on the
// allocating thread (MemoryCategoryScope), so the trainer can report how much
// of a rank's memory is parameters, gradients, optimiser state or activations.
// Counters are atomic; reading them is cheap and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "trident/core/device.h"

namespace trident {

enum class MemoryCategory : std::uint8_t { other, parameters, gradients, optimizer, activations, communication };
inline constexpr int kNumMemoryCategories = 6;

struct MemoryStats {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::array<std::int64_t, kNumMemoryCategories> current_by_category{};
  std::array<std::int64_t, kNumMemoryCategories> peak_by_category{};
};

MemoryStats memory_stats(Device device);
// Resets peak counters to the current values.
void reset_peak_memory(Device device);

MemoryCategory current_memory_category() noexcept;

// RAII: allocations on this thread are charged to `category` while it lives.
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category) noexcept;
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

namespace detail {
void record_allocation(Device device, MemoryCategory category, std::int64_t bytes) noexcept;
void record_free(Device device, MemoryCategory category, std::int64_t bytes) noexcept;
}  // namespace detail

}  // namespace trident
