// Embedding kernels (semantics: kernels/cpu/embedding.h).
//
// Forward: one block per token copies its weight row in the widest unit (16, 8,
// 4 or 2 bytes) that divides the row and both base addresses: exact in every
// dtype, as the CPU's memcpy.
//
// Backward, without atomics: the (id, position) pairs are sorted by id with
// cub's stable radix sort (positions of equal ids stay ascending), the bounds
// [begin, end) of each id's run in the sorted order are recorded per vocabulary
// row, and then one warp owns each (vocabulary row, 256-column tile): it sums
// the dout rows of its run in position order in Acc<T>, starting from the first
// row as the CPU does, rounds once and writes the tile; rows no id refers to
// get zeros. Every dweight element is written exactly once, so the result is
// the CPU's sum order and is the same on every run. A very frequent id is one
// warp's sequential walk per tile (dim / 256 warps share its row).
#include "trident/kernels/cuda/embedding.h"

#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cstdint>
#include <string>

#include "trident/kernels/cuda/common.cuh"
#include "trident/kernels/cuda/embedding_launch.h"

namespace trident::kernels::cuda {

namespace {

constexpr int kFlatThreads = 256;
constexpr int kRowsThreads = 256;  // backward: eight warp owners per block
constexpr int kTilePerLane = 8;
constexpr std::int64_t kTile = 32 * kTilePerLane;  // dweight columns per warp owner

// --- forward ------------------------------------------------------------------

template <typename U, typename I>
__global__ void __launch_bounds__(kFlatThreads)
    embedding_forward_kernel(const U* __restrict__ weight, const I* __restrict__ ids, U* __restrict__ out,
                             std::int64_t num_ids, std::int64_t units) {
  for (std::int64_t t = blockIdx.x; t < num_ids; t += gridDim.x) {
    const U* src = weight + static_cast<std::int64_t>(ids[t]) * units;
    U* dst = out + t * units;
    for (std::int64_t u = threadIdx.x; u < units; u += blockDim.x) dst[u] = src[u];
  }
}

template <typename U, typename I>
void launch_forward(const void* weight, const I* ids, void* out, std::int64_t num_ids, std::int64_t row_bytes) {
  const std::int64_t units = row_bytes / static_cast<std::int64_t>(sizeof(U));
  const std::int64_t warps = (units + 31) / 32;
  const int threads = static_cast<int>(warps >= kFlatThreads / 32 ? kFlatThreads : 32 * warps);
  embedding_forward_kernel<U, I><<<blocks_for(num_ids, 1), threads, 0, stream()>>>(
      static_cast<const U*>(weight), ids, static_cast<U*>(out), num_ids, units);
  check_launch("embedding");
}

// --- backward -----------------------------------------------------------------

template <typename I>
__global__ void __launch_bounds__(kFlatThreads)
    sort_input_kernel(const I* __restrict__ ids, int n, unsigned* __restrict__ keys, int* __restrict__ positions) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    keys[i] = static_cast<unsigned>(ids[i]);
    positions[i] = static_cast<int>(i);
  }
}

// begin[k], end[k]: where key k's run starts and ends in the sorted keys
// (both stay 0 for keys that do not occur). Keys >= vocab (rejected by ops::) are skipped.
__global__ void __launch_bounds__(kFlatThreads)
    run_bounds_kernel(const unsigned* __restrict__ keys, int n, unsigned vocab, int* __restrict__ begin,
                      int* __restrict__ end) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const unsigned k = keys[i];
    if (k >= vocab) continue;
    if (i == 0 || keys[i - 1] != k) begin[k] = static_cast<int>(i);
    if (i == n - 1 || keys[i + 1] != k) end[k] = static_cast<int>(i + 1);
  }
}

// One warp per (vocabulary row v, tile of kTile columns), with S the sum of
// dout[positions[j], c] for j in [begin[v], end[v]), in j order, in Acc<T>:
// dweight[v, c] = S, or += S (added in Acc<O>) for the rows some id refers to
// when accumulating. O is T, or float for 16-bit dout (an f32 gradient buffer).
template <typename T, typename O>
__global__ void __launch_bounds__(kRowsThreads)
    embedding_backward_rows_kernel(const T* __restrict__ dout, const int* __restrict__ positions,
                                   const int* __restrict__ begin, const int* __restrict__ end,
                                   O* __restrict__ dweight, std::int64_t vocab, std::int64_t dim,
                                   std::int64_t tiles, bool accumulate) {
  using A = Acc<T>;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const std::int64_t warps_per_block = blockDim.x >> 5;
  const std::int64_t items = vocab * tiles;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * warps_per_block;
  for (std::int64_t item = blockIdx.x * warps_per_block + (threadIdx.x >> 5); item < items; item += stride) {
    const std::int64_t v = item / tiles;
    const std::int64_t c0 = (item % tiles) * kTile + lane;
    const int b = begin[v], e = end[v];
    if (b >= e && accumulate) continue;  // a row no id refers to keeps its gradient
    A acc[kTilePerLane];
    if (b < e) {
      const T* first = dout + static_cast<std::int64_t>(positions[b]) * dim;
#pragma unroll
      for (int k = 0; k < kTilePerLane; ++k) {
        const std::int64_t c = c0 + 32 * k;
        acc[k] = c < dim ? load(first + c) : A(0);
      }
      for (int j = b + 1; j < e; ++j) {
        const T* src = dout + static_cast<std::int64_t>(positions[j]) * dim;
#pragma unroll
        for (int k = 0; k < kTilePerLane; ++k) {
          const std::int64_t c = c0 + 32 * k;
          if (c < dim) acc[k] += load(src + c);
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < kTilePerLane; ++k) acc[k] = A(0);
    }
    O* row = dweight + v * dim;
#pragma unroll
    for (int k = 0; k < kTilePerLane; ++k) {
      const std::int64_t c = c0 + 32 * k;
      if (c >= dim) continue;
      const Acc<O> sum = static_cast<Acc<O>>(acc[k]);
      store(row + c, accumulate ? load(row + c) + sum : sum);
    }
  }
}

// Bits a radix sort must look at for keys in [0, vocab).
int key_bits(std::int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (static_cast<std::uint64_t>(vocab - 1) >> bits) != 0) ++bits;
  return bits;
}

std::size_t align256(std::size_t n) { return (n + 255) / 256 * 256; }

// Scratch layout of the backward, every region 256-byte aligned from the base.
struct SortScratch {
  std::size_t keys_in = 0, keys_out = 0, pos_in = 0, pos_out = 0, begin = 0, end = 0, temp = 0;
  std::size_t temp_bytes = 0, total = 0;
};

SortScratch sort_scratch(std::int64_t num_ids, std::int64_t vocab) {
  SortScratch s;
  if (num_ids <= 0) return s;
  if (num_ids > INT_MAX || vocab > INT_MAX) {
    throw_error("CUDA embedding_backward: more than 2^31 - 1 ids (" + std::to_string(num_ids) +
                ") or vocabulary rows (" + std::to_string(vocab) + ")");
  }
  const int n = static_cast<int>(num_ids);
  check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, s.temp_bytes, static_cast<const unsigned*>(nullptr),
                                             static_cast<unsigned*>(nullptr), static_cast<const int*>(nullptr),
                                             static_cast<int*>(nullptr), n, 0, key_bits(vocab), stream()),
             "embedding_backward: cub::DeviceRadixSort::SortPairs (workspace size)");
  const std::size_t ids_bytes = align256(static_cast<std::size_t>(n) * sizeof(unsigned));
  const std::size_t vocab_bytes = align256(static_cast<std::size_t>(vocab) * sizeof(int));
  s.keys_in = 0;
  s.keys_out = s.keys_in + ids_bytes;
  s.pos_in = s.keys_out + ids_bytes;
  s.pos_out = s.pos_in + ids_bytes;
  s.begin = s.pos_out + ids_bytes;
  s.end = s.begin + vocab_bytes;
  s.temp = s.end + vocab_bytes;
  // 255 bytes of slack let the base itself be aligned up to 256.
  s.total = s.temp + align256(s.temp_bytes) + 255;
  return s;
}

template <typename T>
T* at(void* base, std::size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

// --- find_invalid_id ------------------------------------------------------------

__global__ void first_index_init_kernel(long long* first) { *first = LLONG_MAX; }

template <typename I>
__global__ void __launch_bounds__(kFlatThreads)
    find_invalid_kernel(const I* __restrict__ ids, std::int64_t n, std::int64_t vocab, long long* first) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const auto v = static_cast<std::int64_t>(ids[i]);
    if (v < 0 || v >= vocab) atomicMin(first, static_cast<long long>(i));
  }
}

}  // namespace

void embedding_forward(DType dtype, DType id_dtype, const void* weight, const void* ids, void* out,
                       std::int64_t num_ids, std::int64_t dim) {
  const std::int64_t row_bytes = dim * static_cast<std::int64_t>(dtype_size(dtype));
  dispatch_index(id_dtype, "embedding", [&](auto index_tag) {
    using I = decltype(index_tag);
    if (num_ids <= 0 || row_bytes <= 0) return;
    const auto* id = static_cast<const I*>(ids);
    // The widest unit dividing the row length and both base addresses.
    const auto common = static_cast<std::uint64_t>(row_bytes) | reinterpret_cast<std::uintptr_t>(weight) |
                        reinterpret_cast<std::uintptr_t>(out);
    if (common % 16 == 0) {
      launch_forward<uint4>(weight, id, out, num_ids, row_bytes);
    } else if (common % 8 == 0) {
      launch_forward<uint2>(weight, id, out, num_ids, row_bytes);
    } else if (common % 4 == 0) {
      launch_forward<unsigned>(weight, id, out, num_ids, row_bytes);
    } else if (common % 2 == 0) {
      launch_forward<unsigned short>(weight, id, out, num_ids, row_bytes);
    } else {
      launch_forward<unsigned char>(weight, id, out, num_ids, row_bytes);
    }
  });
}

namespace detail {

std::size_t embedding_backward_scratch_bytes(std::int64_t num_ids, std::int64_t vocab) {
  return sort_scratch(num_ids, vocab).total;
}

void launch_embedding_backward(DType dtype, DType grad_dtype, DType id_dtype, const void* dout, const void* ids,
                               void* dweight, std::int64_t num_ids, std::int64_t vocab, std::int64_t dim,
                               bool accumulate, void* scratch) {
  constexpr const char* kernel = "embedding_backward";
  const bool widened = grad_dtype != dtype;
  if (widened && !(grad_dtype == DType::f32 && (dtype == DType::bf16 || dtype == DType::f16))) {
    throw_error("CUDA embedding_backward: a gradient of another dtype than dout's must be f32 for bf16/f16 dout");
  }
  dispatch_floating(dtype, kernel, [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(id_dtype, kernel, [&](auto index_tag) {
      using I = decltype(index_tag);
      if (vocab <= 0 || dim <= 0) return;  // dweight is empty
      if (num_ids <= 0) {                   // no ids: every row is zero (all-zero bits are +0), or unchanged
        if (accumulate) return;
        const std::size_t bytes = static_cast<std::size_t>(vocab * dim) * (widened ? sizeof(float) : sizeof(T));
        check_cuda(cudaMemsetAsync(dweight, 0, bytes, stream()), kernel);
        return;
      }
      const SortScratch s = sort_scratch(num_ids, vocab);
      const int n = static_cast<int>(num_ids);
      void* base = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(scratch) + 255) / 256 * 256);
      auto* keys_in = at<unsigned>(base, s.keys_in);
      auto* keys_out = at<unsigned>(base, s.keys_out);
      auto* pos_in = at<int>(base, s.pos_in);
      auto* pos_out = at<int>(base, s.pos_out);
      auto* begin = at<int>(base, s.begin);
      auto* end = at<int>(base, s.end);

      sort_input_kernel<I><<<blocks_for(n, kFlatThreads), kFlatThreads, 0, stream()>>>(static_cast<const I*>(ids), n,
                                                                                       keys_in, pos_in);
      check_launch(kernel);
      std::size_t temp_bytes = s.temp_bytes;
      check_cuda(cub::DeviceRadixSort::SortPairs(at<void>(base, s.temp), temp_bytes, keys_in, keys_out, pos_in,
                                                 pos_out, n, 0, key_bits(vocab), stream()),
                 "embedding_backward: cub::DeviceRadixSort::SortPairs");
      const std::size_t bounds_bytes = static_cast<std::size_t>(vocab) * sizeof(int);
      check_cuda(cudaMemsetAsync(begin, 0, bounds_bytes, stream()), kernel);
      check_cuda(cudaMemsetAsync(end, 0, bounds_bytes, stream()), kernel);
      run_bounds_kernel<<<blocks_for(n, kFlatThreads), kFlatThreads, 0, stream()>>>(
          keys_out, n, static_cast<unsigned>(vocab), begin, end);
      check_launch(kernel);
      const std::int64_t tiles = (dim + kTile - 1) / kTile;
      const dim3 grid(blocks_for(vocab * tiles, kRowsThreads / 32));
      if (widened) {
        embedding_backward_rows_kernel<T, float><<<grid, kRowsThreads, 0, stream()>>>(
            static_cast<const T*>(dout), pos_out, begin, end, static_cast<float*>(dweight), vocab, dim, tiles,
            accumulate);
      } else {
        embedding_backward_rows_kernel<T, T><<<grid, kRowsThreads, 0, stream()>>>(
            static_cast<const T*>(dout), pos_out, begin, end, static_cast<T*>(dweight), vocab, dim, tiles,
            accumulate);
      }
      check_launch(kernel);
    });
  });
}

std::int64_t launch_find_invalid_id(DType id_dtype, const void* ids, std::int64_t num_ids, std::int64_t vocab,
                                    std::int64_t* bad_id, void* scratch) {
  constexpr const char* kernel = "find_invalid_id";
  std::int64_t found = -1;
  dispatch_index(id_dtype, kernel, [&](auto index_tag) {
    using I = decltype(index_tag);
    if (num_ids <= 0) return;
    const auto* id = static_cast<const I*>(ids);
    auto* first = static_cast<long long*>(scratch);
    first_index_init_kernel<<<1, 1, 0, stream()>>>(first);
    check_launch(kernel);
    find_invalid_kernel<I><<<blocks_for(num_ids, kFlatThreads), kFlatThreads, 0, stream()>>>(id, num_ids, vocab,
                                                                                            first);
    check_launch(kernel);
    long long at_host = LLONG_MAX;
    check_cuda(cudaMemcpyAsync(&at_host, first, sizeof(at_host), cudaMemcpyDeviceToHost, stream()), kernel);
    synchronize_stream(kernel);
    if (at_host == LLONG_MAX) return;
    I value{};
    check_cuda(cudaMemcpyAsync(&value, id + at_host, sizeof(I), cudaMemcpyDeviceToHost, stream()), kernel);
    synchronize_stream(kernel);
    found = static_cast<std::int64_t>(at_host);
    *bad_id = static_cast<std::int64_t>(value);
  });
  return found;
}

}  // namespace detail

}  // namespace trident::kernels::cuda
