// Reductions in f64, deterministic: every sum is a fixed tree over fixed
// chunks (no atomics), so a result depends only on the input and its size,
// not on the device or the launch.
//
// sum_all: pass 1, one 256-thread block per 8192-element chunk (each thread
// sums a stride-256 comb, then a block tree) writes a partial; pass 2, one
// 1024-thread block sums the partials the same way.
// sum_rows: a (32, 8) block per 32 columns × one group of rows; the 8 row
// threads of a column are combined in order. Over one group the result is
// stored directly, otherwise pass 2 (a thread per column) adds the group sums
// in group order.
#include "trident/kernels/cuda/reduce_launch.h"

#include "trident/kernels/cuda/common.cuh"

namespace trident::kernels::cuda::detail {

namespace {

constexpr int kSumThreads = 256;
constexpr int kFinalThreads = 1024;

template <typename T>
__global__ void __launch_bounds__(kSumThreads) sum_chunks_kernel(const T* x, std::int64_t n, double* partials) {
  __shared__ double scratch[32];
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * kSumChunk;
  const std::int64_t end = begin + kSumChunk < n ? begin + kSumChunk : n;
  double s = 0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += kSumThreads) s += static_cast<double>(load(x + i));
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kFinalThreads)
    sum_partials_kernel(const double* partials, std::int64_t count, double* result) {
  __shared__ double scratch[32];
  double s = 0;
  for (std::int64_t i = threadIdx.x; i < count; i += kFinalThreads) s += partials[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) *result = s;
}

constexpr int kColTile = 32, kRowThreads = 8;

// Group blockIdx.y of `group` rows, columns blockIdx.x * 32 + [0, 32). Writes the group's
// column sums to partials[group_index * cols + c], or to out when there is one group.
template <typename T>
__global__ void __launch_bounds__(kColTile* kRowThreads)
    sum_rows_kernel(const T* x, T* out, std::int64_t rows, std::int64_t cols, std::int64_t group, double* partials) {
  __shared__ double s[kRowThreads][kColTile + 1];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * group;
  const std::int64_t r1 = r0 + group < rows ? r0 + group : rows;
  double acc = 0;
  if (c < cols) {
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kRowThreads) acc += static_cast<double>(load(x + r * cols + c));
  }
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double total = s[0][threadIdx.x];
#pragma unroll
    for (int k = 1; k < kRowThreads; ++k) total += s[k][threadIdx.x];
    if (partials == nullptr) {
      out[c] = to_storage<T>(static_cast<Acc<T>>(total));
    } else {
      partials[static_cast<std::int64_t>(blockIdx.y) * cols + c] = total;
    }
  }
}

template <typename T>
__global__ void sum_groups_kernel(const double* partials, std::int64_t groups, std::int64_t cols, T* out) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += stride) {
    double total = 0;
    for (std::int64_t g = 0; g < groups; ++g) total += partials[g * cols + c];
    out[c] = to_storage<T>(static_cast<Acc<T>>(total));
  }
}

}  // namespace

void launch_sum_all(DType dtype, const void* x, std::int64_t n, double* partials, double* result) {
  const std::int64_t chunks = sum_all_partials(n);
  dispatch_floating(dtype, "sum", [&](auto tag) {
    using T = decltype(tag);
    sum_chunks_kernel<T><<<static_cast<unsigned>(chunks), kSumThreads, 0, stream()>>>(static_cast<const T*>(x), n,
                                                                                       partials);
    check_launch("sum (chunks)");
  });
  sum_partials_kernel<<<1, kFinalThreads, 0, stream()>>>(partials, chunks, result);
  check_launch("sum (partials)");
}

void launch_sum_rows(DType dtype, const void* x, void* out, std::int64_t rows, std::int64_t cols, double* partials) {
  const std::int64_t group = sum_rows_group(rows);
  const std::int64_t groups = sum_rows_groups(rows);
  dispatch_floating(dtype, "sum_rows", [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile), static_cast<unsigned>(groups));
    const dim3 block(kColTile, kRowThreads);
    sum_rows_kernel<T><<<grid, block, 0, stream()>>>(static_cast<const T*>(x), static_cast<T*>(out), rows, cols, group,
                                                     groups == 1 ? nullptr : partials);
    check_launch("sum_rows");
    if (groups > 1) {
      sum_groups_kernel<T><<<blocks_for(cols, 256), 256, 0, stream()>>>(partials, groups, cols, static_cast<T*>(out));
      check_launch("sum_rows (groups)");
    }
  });
}

}  // namespace trident::kernels::cuda::detail
