// Host side of the CUDA reductions: f64 scratch from the caching allocator (a
// Tensor freed on return; the stream orders any reuse after our kernels) and,
// for sum_all, the one result read back to the host.
#include "trident/kernels/cuda/reduce.h"

#include "trident/core/backend.h"
#include "trident/core/tensor.h"
#include "trident/kernels/cuda/device.h"
#include "trident/kernels/cuda/reduce_launch.h"

namespace trident::kernels::cuda {

double sum_all(DType dtype, const void* x, std::int64_t n) {
  if (n <= 0) return 0.0;
  const Device device = Device::cuda(current_device());
  const std::int64_t partials = detail::sum_all_partials(n);
  const Tensor scratch = Tensor::empty(Shape{partials + 1}, DType::f64, device);
  double* result = scratch.data<double>() + partials;
  detail::launch_sum_all(dtype, x, n, scratch.data<double>(), result);
  double total = 0;
  backend_for(device).copy(&total, Device::cpu(), result, device, sizeof(double));  // waits for the stream
  return total;
}

void sum_rows(DType dtype, const void* x, void* out, std::int64_t rows, std::int64_t cols) {
  if (cols <= 0) return;
  const std::int64_t groups = detail::sum_rows_groups(rows);
  Tensor scratch;
  if (groups > 1) scratch = Tensor::empty(Shape{groups * cols}, DType::f64, Device::cuda(current_device()));
  detail::launch_sum_rows(dtype, x, out, rows, cols, groups > 1 ? scratch.data<double>() : nullptr);
}

}  // namespace trident::kernels::cuda
