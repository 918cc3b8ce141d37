// Device dispatch helpers shared by the ops:: implementations.
//
// Every ops:: entry point validates its arguments (including that all tensors
// share one device), then runs the kernel of that device:
//
//   TRIDENT_KERNEL(x.device(), layer_norm_forward, x.dtype(), x.raw_data(), ...);
//
// calls kernels::cpu::layer_norm_forward for CPU tensors and
// kernels::cuda::layer_norm_forward (same signature, on that device's compute
// stream) for CUDA tensors. In a build without the CUDA backend a CUDA tensor
// is a clear error naming the kernel (it cannot be created there anyway).
#pragma once

#include <initializer_list>
#include <string_view>

#include "trident/core/tensor.h"

#if TRIDENT_HAVE_CUDA
#include "trident/kernels/cuda/device.h"
#include "trident/kernels/cuda/kernels.h"
#endif

namespace trident::ops {

namespace detail {
template <typename R>
R no_cuda_kernel(const char* kernel) {
  TRIDENT_FAIL("{}: this build has no CUDA backend (configure with -DTRIDENT_CUDA=ON where nvcc is installed)",
               kernel);
}
}  // namespace detail

}  // namespace trident::ops

#if TRIDENT_HAVE_CUDA
#define TRIDENT_KERNEL(device, kernel, ...)                                                             \
  ((device).is_cuda() ? (::trident::kernels::cuda::DeviceGuard((device).index),                         \
                         ::trident::kernels::cuda::kernel(__VA_ARGS__))                                 \
                      : ::trident::kernels::cpu::kernel(__VA_ARGS__))
#else
#define TRIDENT_KERNEL(device, kernel, ...)                                                                          \
  ((device).is_cuda() ? ::trident::ops::detail::no_cuda_kernel<decltype(::trident::kernels::cpu::kernel(__VA_ARGS__))>( \
                            #kernel)                                                                                \
                      : ::trident::kernels::cpu::kernel(__VA_ARGS__))
#endif
