// Shared by the CUDA kernel files (*.cu) only; never included by a public header.
//
// nvcc compiles the .cu files as C++17 and cannot parse fmt in C++20 mode, so
// they include only fmt-free headers (core/dtype_enum.h, the kernel-family
// headers of kernels/cpu whose types they need, device.h); errors go through
// throw_error/check_status (device.h), which format on the host side. A
// family whose public signature needs fmt-laden types (Shape, CounterRng)
// implements it in a <family>.cpp that calls launchers in its .cu.
//
// Every kernel of a family header (kernels/cuda/<family>.h) has the signature
// of its CPU twin in kernels/cpu/<family>.h: raw pointers to device memory and
// a DType. It runs on the current device's compute stream (device.h), is
// asynchronous unless it returns a host value (then it synchronises that
// stream), and reports launch errors at once with the kernel's name.
//
// Arithmetic follows the CPU kernels: 16-bit floats are loaded, computed in
// f32 and rounded once on store (round to nearest even, as core's
// float_to_bf16_bits); f64 computes in f64.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "trident/core/dtype_enum.h"
#include "trident/kernels/cuda/device.h"

namespace trident::kernels::cuda {

inline void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) check_status(static_cast<int>(rc), what);
}

// "CUDA <kernel>: unsupported dtype bf16 (<expected>)"
[[noreturn]] inline void unsupported_dtype(const char* kernel, DType dtype, const char* expected) {
  throw_error(std::string("CUDA ") + kernel + ": unsupported dtype " + std::string(dtype_name(dtype)) + " (expected " +
              expected + ")");
}

// The compute stream of the calling thread's current device.
inline cudaStream_t stream() { return static_cast<cudaStream_t>(compute_stream(current_device()).native()); }

// Call right after a <<<...>>> launch: a bad configuration is reported with the kernel's name.
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

// Waits for the compute stream (before returning a host value computed on the device).
inline void synchronize_stream(const char* what) { check_cuda(cudaStreamSynchronize(stream()), what); }

// Grid size for n elements with `threads` per block, each thread handling `per_thread`
// elements in a grid-stride loop; capped so huge tensors reuse the blocks.
inline unsigned blocks_for(std::int64_t n, int threads, int per_thread = 1) {
  const std::int64_t per_block = static_cast<std::int64_t>(threads) * per_thread;
  const std::int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// --- element types -----------------------------------------------------------
// T is the storage type (float, double, __nv_bfloat16, __half); Acc<T> the
// arithmetic type (double for double, float otherwise).
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
__device__ __forceinline__ Acc<T> load(const T* p) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(*p);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(*p);
  } else {
    return *p;
  }
}

template <typename T>
__device__ __forceinline__ T to_storage(Acc<T> v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return v;
  }
}

template <typename T>
__device__ __forceinline__ void store(T* p, Acc<T> v) {
  *p = to_storage<T>(v);
}

// Accurate exp/log/erfc in the arithmetic type (expf/logf/erfcf for float, the
// double functions for double): the CPU kernels' precision, not __expf's.
template <typename A>
__device__ __forceinline__ A exp_acc(A x) {
  if constexpr (std::is_same_v<A, float>) {
    return expf(x);
  } else {
    return exp(x);
  }
}

template <typename A>
__device__ __forceinline__ A log_acc(A x) {
  if constexpr (std::is_same_v<A, float>) {
    return logf(x);
  } else {
    return log(x);
  }
}

template <typename A>
__device__ __forceinline__ A erfc_acc(A x) {
  if constexpr (std::is_same_v<A, float>) {
    return erfcf(x);
  } else {
    return erfc(x);
  }
}

// Calls f(T{}) with T the storage type of a floating dtype; other dtypes are a
// clear error naming the kernel.
template <typename F>
void dispatch_floating(DType dtype, const char* kernel, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); return;
    case DType::f64: f(double{}); return;
    case DType::bf16: f(__nv_bfloat16{}); return;
    case DType::f16: f(__half{}); return;
    default: unsupported_dtype(kernel, dtype, "a floating type");
  }
}

// Calls f(I{}) with I the integer type of an index dtype (i32 or i64).
template <typename F>
void dispatch_index(DType dtype, const char* kernel, F&& f) {
  switch (dtype) {
    case DType::i32: f(std::int32_t{}); return;
    case DType::i64: f(std::int64_t{}); return;
    default: unsupported_dtype(kernel, dtype, "i32 or i64");
  }
}

// --- block reductions ---------------------------------------------------------
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread
// gets the result. `scratch` holds 32 values in shared memory; the function
// synchronises the block before returning, so scratch may be reused.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : T(0);
  v = warp_sum(v);
  __syncthreads();
  return v;
}

template <typename T>
__device__ __forceinline__ T block_max(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : T(-INFINITY);
  v = warp_max(v);
  __syncthreads();
  return v;
}

}  // namespace trident::kernels::cuda
