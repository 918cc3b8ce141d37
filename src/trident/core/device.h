// Device: where a tensor's storage lives: the host (cpu) or one GPU (cuda:INDEX, the CUDA device ordinal as
// this process sees it). A value type, compared by kind and index; Tensor::to(Device) moves data between
// them. Tensors can live on cuda only in a build with the CUDA backend (`trident info` says so).
#pragma once

#include <fmt/format.h>

#include <string>

namespace trident {

enum class DeviceType : std::uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const noexcept { return type == DeviceType::cpu; }
  bool is_cuda() const noexcept { return type == DeviceType::cuda; }
  std::string to_string() const;  // "cpu", "cuda:0"
  friend bool operator==(const Device&, const Device&) = default;
};

// Parses "cpu", "cuda" (= cuda:0), "cuda:1"; anything else throws trident::Error naming the text.
Device parse_device(std::string_view text);

}  // namespace trident

template <>
struct fmt::formatter<trident::Device> : fmt::formatter<std::string_view> {
  auto format(const trident::Device& d, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(d.to_string(), ctx);
  }
};
