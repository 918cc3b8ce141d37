#include "trident/core/memory.h"

#include <atomic>

namespace trident {
namespace {

constexpr int kMaxDevices = 17;  // cpu + 16 GPUs

struct Counters {
  std::atomic<std::int64_t> current{0};
  std::atomic<std::int64_t> peak{0};
};

struct DeviceCounters {
  Counters total;
  std::array<Counters, kNumMemoryCategories> by_category;
};

std::array<DeviceCounters, kMaxDevices> g_counters;
thread_local MemoryCategory t_category = MemoryCategory::other;

int slot(Device d) noexcept {
  int s = d.is_cpu() ? 0 : 1 + d.index;
  return s < kMaxDevices ? s : kMaxDevices - 1;
}

void add(Counters& c, std::int64_t bytes) noexcept {
  std::int64_t now = c.current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::int64_t peak = c.peak.load(std::memory_order_relaxed);
  while (now > peak && !c.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

}  // namespace

MemoryStats memory_stats(Device device) {
  const DeviceCounters& d = g_counters[static_cast<std::size_t>(slot(device))];
  MemoryStats s;
  s.current = d.total.current.load(std::memory_order_relaxed);
  s.peak = d.total.peak.load(std::memory_order_relaxed);
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    s.current_by_category[static_cast<std::size_t>(i)] = d.by_category[static_cast<std::size_t>(i)].current.load();
    s.peak_by_category[static_cast<std::size_t>(i)] = d.by_category[static_cast<std::size_t>(i)].peak.load();
  }
  return s;
}

void reset_peak_memory(Device device) {
  DeviceCounters& d = g_counters[static_cast<std::size_t>(slot(device))];
  d.total.peak.store(d.total.current.load());
  for (auto& c : d.by_category) c.peak.store(c.current.load());
}

MemoryCategory current_memory_category() noexcept { return t_category; }

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) noexcept : previous_(t_category) {
  t_category = category;
}
MemoryCategoryScope::~MemoryCategoryScope() { t_category = previous_; }

namespace detail {
void record_allocation(Device device, MemoryCategory category, std::int64_t bytes) noexcept {
  DeviceCounters& d = g_counters[static_cast<std::size_t>(slot(device))];
  add(d.total, bytes);
  add(d.by_category[static_cast<std::size_t>(category)], bytes);
}
void record_free(Device device, MemoryCategory category, std::int64_t bytes) noexcept {
  DeviceCounters& d = g_counters[static_cast<std::size_t>(slot(device))];
  d.total.current.fetch_sub(bytes, std::memory_order_relaxed);
  d.by_category[static_cast<std::size_t>(category)].current.fetch_sub(bytes, std::memory_order_relaxed);
}
}  // namespace detail

}  // namespace trident
