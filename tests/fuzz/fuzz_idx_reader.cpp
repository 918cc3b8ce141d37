// libFuzzer target: the Megatron .idx parser on arbitrary bytes. The first 8
// bytes give the .bin size it is checked against; the rest is the .idx image.
// Any input must parse or throw trident::Error — never crash or over-read.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "trident/core/error.h"
#include "trident/data/dataset/indexed_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 8) return 0;
  std::uint64_t bin_bytes = 0;
  std::memcpy(&bin_bytes, data, 8);
  const std::span<const std::byte> idx(reinterpret_cast<const std::byte*>(data + 8), size - 8);
  try {
    const auto content = trident::data::parse_index(idx, bin_bytes % (1u << 20), "fuzz.idx", "fuzz.bin");
    static_cast<void>(content);
  } catch (const trident::Error&) {
  }
  return 0;
}
