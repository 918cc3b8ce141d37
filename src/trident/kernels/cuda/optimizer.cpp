// The optimizer entry points that need device memory of their own (optimizer.cu
// launches the kernels): sum_of_squares' partial sums and adamw_step_multi's
// chunk table, both from the device's caching allocator (scratch.h).
#include "trident/kernels/cuda/optimizer.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "trident/kernels/cuda/optimizer_launch.h"
#include "trident/kernels/cuda/scratch.h"

namespace trident::kernels::cuda {

namespace {
template <typename Ptr>
Ptr advance(Ptr p, std::int64_t elements, std::size_t element_size) {
  if (p == nullptr) return p;
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Ptr>>, const char*, char*>;
  return static_cast<Ptr>(static_cast<Byte>(p) + static_cast<std::size_t>(elements) * element_size);
}
}  // namespace

double sum_of_squares(DType dtype, const void* x, std::int64_t n) {
  if (n <= 0) return 0.0;
  const auto scratch = detail::device_scratch(detail::sum_of_squares_scratch_bytes());
  return detail::launch_sum_of_squares(dtype, x, n, detail::scratch_data(scratch));
}

void adamw_step_multi(DType param_dtype, DType grad_dtype, DType copy_dtype, const AdamWTensor* tensors,
                      std::size_t count, const AdamWHyper& hyper) {
  const std::size_t p_size = dtype_size(param_dtype), g_size = dtype_size(grad_dtype), c_size = dtype_size(copy_dtype);
  std::vector<detail::AdamWChunk> chunks;
  for (std::size_t t = 0; t < count; ++t) {
    const AdamWTensor& a = tensors[t];
    for (std::int64_t off = 0; off < a.n; off += detail::kAdamWChunkElements) {
      chunks.push_back({advance(a.param, off, p_size), advance(a.grad, off, g_size), advance(a.exp_avg, off, p_size),
                        advance(a.exp_avg_sq, off, p_size), advance(a.param_copy, off, c_size),
                        std::min(detail::kAdamWChunkElements, a.n - off)});
    }
  }
  const auto table = detail::device_scratch(chunks.size() * sizeof(detail::AdamWChunk));
  detail::launch_adamw_step_multi(param_dtype, grad_dtype, copy_dtype, chunks.data(),
                                  static_cast<detail::AdamWChunk*>(detail::scratch_data(table)), chunks.size(), hyper);
}

}  // namespace trident::kernels::cuda
