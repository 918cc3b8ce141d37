#include "trident/core/device.h"

#include <charconv>

#include "trident/core/error.h"

namespace trident {

std::string Device::to_string() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.starts_with("cuda:")) {
    int index = -1;
    auto digits = text.substr(5);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && ptr == digits.data() + digits.size() && index >= 0) return Device::cuda(index);
  }
  TRIDENT_FAIL("unknown device '{}' (expected cpu, cuda or cuda:N)", text);
}

}  // namespace trident
