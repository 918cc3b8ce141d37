// Host side of the CUDA RoPE: the positions arrive as a host array (the CPU
// kernel's signature). Consecutive positions — every call with a position
// offset, which is how training and KV-cache generation call rope — are passed
// to the kernel as their first value, with no copy. Other positions are copied
// to device memory from the caching allocator; that copy waits for the stream
// (the host array may be freed as soon as we return).
#include "trident/kernels/cuda/rope.h"

#include "trident/core/backend.h"
#include "trident/core/tensor.h"
#include "trident/kernels/cuda/device.h"
#include "trident/kernels/cuda/rope_launch.h"

namespace trident::kernels::cuda {

void rope(DType dtype, const void* x, void* out, const std::int64_t* positions, std::int64_t batch, std::int64_t seq,
          std::int64_t heads, std::int64_t head_dim, const RopeFrequencies& freq, bool inverse) {
  if (batch <= 0 || seq <= 0 || heads <= 0 || head_dim <= 0) return;
  bool consecutive = true;
  for (std::int64_t t = 1; t < seq && consecutive; ++t) consecutive = positions[t] == positions[0] + t;
  if (consecutive) {
    detail::launch_rope(dtype, x, out, nullptr, positions[0], batch, seq, heads, head_dim, freq, inverse);
    return;
  }
  const Device device = Device::cuda(current_device());
  const Tensor on_device = Tensor::empty(Shape{seq}, DType::i64, device);
  backend_for(device).copy(on_device.raw_data(), device, positions, Device::cpu(),
                           static_cast<std::size_t>(seq) * sizeof(std::int64_t));
  detail::launch_rope(dtype, x, out, on_device.data<std::int64_t>(), 0, batch, seq, heads, head_dim, freq, inverse);
}

}  // namespace trident::kernels::cuda
