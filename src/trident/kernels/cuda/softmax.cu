// Row softmax, as the CPU kernel (kernels/cpu/softmax.cpp): max-subtracted
// exponentials in Acc<T>, y = e * (1 / sum e), one rounding on store; a row
// whose maximum is -inf is all zeros. Backward: dx = y * (dy - sum(y * dy)).
//
// Launch shapes: rows of up to kWarpCols columns go one per warp (256-thread
// blocks, 8 rows each, grid-stride over rows); lane l holds columns l + 32k in
// registers (kPerLane of them, the smallest of 2, 8, 32 that covers the row).
// Longer rows go one per 512-thread block (grid-stride over rows), three
// passes (max, sum, write) over the row in global memory, which stays in
// L1/L2 between passes. Every reduction is a fixed shuffle tree: results do
// not depend on the launch.
#include "trident/kernels/cuda/softmax.h"

#include "trident/kernels/cuda/common.cuh"

namespace trident::kernels::cuda {

namespace {

constexpr int kWarpCols = 1024;
constexpr int kWarpBlock = 256;  // 8 warps, one row each
constexpr int kRowBlock = 512;
constexpr unsigned kMaxGrid = 65535u * 8u;

template <typename A>
__device__ __forceinline__ A negative_infinity() {
  return -static_cast<A>(INFINITY);
}

// The warp's row index and the number of warps in the grid.
__device__ __forceinline__ std::int64_t warp_row() {
  return static_cast<std::int64_t>(blockIdx.x) * (kWarpBlock / 32) + threadIdx.x / 32;
}
__device__ __forceinline__ std::int64_t warp_rows_per_grid() {
  return static_cast<std::int64_t>(gridDim.x) * (kWarpBlock / 32);
}

template <typename T, int kPerLane>
__global__ void __launch_bounds__(kWarpBlock)
    softmax_warp_kernel(const T* x, T* y, std::int64_t rows, int cols) {
  using A = Acc<T>;
  const int lane = threadIdx.x & 31;
  // The loop bound is the same for the 32 lanes of a warp, so the shuffles see the whole warp.
  for (std::int64_t r = warp_row(); r < rows; r += warp_rows_per_grid()) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    A v[kPerLane];
    A mx = negative_infinity<A>();
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int c = lane + 32 * k;
      v[k] = c < cols ? load(xr + c) : negative_infinity<A>();
      mx = max(mx, v[k]);
    }
    mx = warp_max(mx);
    if (mx == negative_infinity<A>()) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int c = lane + 32 * k;
        if (c < cols) store(yr + c, A(0));
      }
      continue;
    }
    A sum = 0;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int c = lane + 32 * k;
      v[k] = c < cols ? exp_acc(v[k] - mx) : A(0);
      sum += v[k];
    }
    const A inv = A(1) / warp_sum(sum);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int c = lane + 32 * k;
      if (c < cols) store(yr + c, v[k] * inv);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowBlock) softmax_block_kernel(const T* x, T* y, std::int64_t rows, std::int64_t cols) {
  using A = Acc<T>;
  __shared__ A scratch[32];
  // The row loop and the -inf test depend on the block only: every thread reaches each block_* barrier.
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    A mx = negative_infinity<A>();
    for (std::int64_t c = threadIdx.x; c < cols; c += kRowBlock) mx = max(mx, load(xr + c));
    mx = block_max(mx, scratch);
    if (mx == negative_infinity<A>()) {
      for (std::int64_t c = threadIdx.x; c < cols; c += kRowBlock) store(yr + c, A(0));
      continue;
    }
    A sum = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += kRowBlock) sum += exp_acc(load(xr + c) - mx);
    const A inv = A(1) / block_sum(sum, scratch);
    for (std::int64_t c = threadIdx.x; c < cols; c += kRowBlock) store(yr + c, exp_acc(load(xr + c) - mx) * inv);
  }
}

template <typename T>
__global__ void __launch_bounds__(kWarpBlock)
    softmax_backward_warp_kernel(const T* y, const T* dy, T* dx, std::int64_t rows, int cols) {
  using A = Acc<T>;
  const int lane = threadIdx.x & 31;
  for (std::int64_t r = warp_row(); r < rows; r += warp_rows_per_grid()) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    A dot = 0;
    for (int c = lane; c < cols; c += 32) dot += load(yr + c) * load(dyr + c);
    dot = warp_sum(dot);
    for (int c = lane; c < cols; c += 32) store(dxr + c, load(yr + c) * (load(dyr + c) - dot));
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowBlock)
    softmax_backward_block_kernel(const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t cols) {
  using A = Acc<T>;
  __shared__ A scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    A dot = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += kRowBlock) dot += load(yr + c) * load(dyr + c);
    dot = block_sum(dot, scratch);
    for (std::int64_t c = threadIdx.x; c < cols; c += kRowBlock) store(dxr + c, load(yr + c) * (load(dyr + c) - dot));
  }
}

unsigned row_blocks(std::int64_t rows) { return static_cast<unsigned>(rows < kMaxGrid ? rows : kMaxGrid); }

}  // namespace

void softmax_forward(DType dtype, const void* x, void* y, std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  dispatch_floating(dtype, "softmax", [&](auto tag) {
    using T = decltype(tag);
    const auto* px = static_cast<const T*>(x);
    auto* py = static_cast<T*>(y);
    if (cols <= kWarpCols) {
      const unsigned blocks = blocks_for(rows, kWarpBlock / 32);
      const int c = static_cast<int>(cols);
      if (cols <= 64) {
        softmax_warp_kernel<T, 2><<<blocks, kWarpBlock, 0, stream()>>>(px, py, rows, c);
      } else if (cols <= 256) {
        softmax_warp_kernel<T, 8><<<blocks, kWarpBlock, 0, stream()>>>(px, py, rows, c);
      } else {
        softmax_warp_kernel<T, 32><<<blocks, kWarpBlock, 0, stream()>>>(px, py, rows, c);
      }
    } else {
      softmax_block_kernel<T><<<row_blocks(rows), kRowBlock, 0, stream()>>>(px, py, rows, cols);
    }
    check_launch("softmax");
  });
}

void softmax_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  dispatch_floating(dtype, "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const auto* py = static_cast<const T*>(y);
    const auto* pdy = static_cast<const T*>(dy);
    auto* pdx = static_cast<T*>(dx);
    if (cols <= kWarpCols) {
      softmax_backward_warp_kernel<T>
          <<<blocks_for(rows, kWarpBlock / 32), kWarpBlock, 0, stream()>>>(py, pdy, pdx, rows, static_cast<int>(cols));
    } else {
      softmax_backward_block_kernel<T><<<row_blocks(rows), kRowBlock, 0, stream()>>>(py, pdy, pdx, rows, cols);
    }
    check_launch("softmax_backward");
  });
}

}  // namespace trident::kernels::cuda
