// libFuzzer target: the restricted unpickler of PyTorch checkpoints (checkpoint/torch_file.h) on
// arbitrary bytes, as a pytorch_model.bin's data.pkl. Any input must give tensor records whose views lie
// inside their storages, or throw trident::Error — never crash, over-read, or allocate by a count the
// input claims.
#include <cstddef>
#include <cstdint>
#include <span>

#include "trident/checkpoint/torch_file.h"
#include "trident/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto records = trident::checkpoint::parse_torch_pickle(std::as_bytes(std::span(data, size)), "fuzz/data.pkl");
    for (const auto& r : records) {
      // The parser's promise: the last element of every non-empty view is inside its storage.
      std::int64_t last = r.offset;
      bool empty = false;
      for (std::size_t d = 0; d < r.shape.rank(); ++d) {
        empty = empty || r.shape[d] == 0;
        if (r.shape[d] > 0) last += (r.shape[d] - 1) * r.stride[d];
      }
      if (!empty && (last < 0 || last >= r.storage_numel)) __builtin_trap();
    }
  } catch (const trident::Error&) {
  }
  return 0;
}
