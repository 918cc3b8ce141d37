// The elementwise launch shared by elementwise.cu and activation.cu (for .cu files only).
//
// map<T, kIn, kOut>(f, ...) applies a functor to n elements: for each i it
// loads in[k][i] (or in[k][i % cols] for the inputs marked in kBias, a [cols]
// vector broadcast over rows), calls f(x, y) with x[kIn] and y[kOut] in Acc<T>,
// and rounds y[j] once into out[j][i]. Threads walk the elements in a
// grid-stride loop, 16 bytes per load (V = 16 / sizeof(T) elements) when every
// pointer is 16-byte aligned and bias rows start on a vector boundary; the
// remainder and misaligned arrays go element by element. An output may alias
// an input at the same index (in-place scale and axpy): each element is read
// and written by one thread, in that order, with plain (coherent) loads.
#pragma once

#include <cstdint>

#include "trident/kernels/cuda/common.cuh"

namespace trident::kernels::cuda::detail {

template <typename T, int kN>
struct alignas(sizeof(T) * kN) Pack {
  T v[kN];
};

template <typename T, int kIn, int kOut>
struct MapArgs {
  const T* in[kIn];
  T* out[kOut];
};

constexpr int kMapThreads = 256;

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <typename T, int kIn, int kOut, unsigned kBias, typename F>
__global__ void __launch_bounds__(kMapThreads)
    map_kernel(MapArgs<T, kIn, kOut> args, std::int64_t n, std::int64_t cols, bool vectorized, F f) {
  static_assert(kIn >= 1 && kOut >= 1, "map_kernel: at least one input and one output");
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  using A = Acc<T>;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t done = 0;
  if (vectorized) {
    const std::int64_t packs = n / V;
    for (std::int64_t p = first; p < packs; p += stride) {
      const std::int64_t i = p * V;
      A x[V][kIn];
      A y[V][kOut];
#pragma unroll
      for (int k = 0; k < kIn; ++k) {
        const std::int64_t at = ((kBias >> k) & 1u) ? i % cols : i;
        const Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(args.in[k] + at);
#pragma unroll
        for (int e = 0; e < V; ++e) x[e][k] = load(&pk.v[e]);
      }
#pragma unroll
      for (int e = 0; e < V; ++e) f(x[e], y[e]);
#pragma unroll
      for (int j = 0; j < kOut; ++j) {
        Pack<T, V> pk;
#pragma unroll
        for (int e = 0; e < V; ++e) pk.v[e] = to_storage<T>(y[e][j]);
        *reinterpret_cast<Pack<T, V>*>(args.out[j] + i) = pk;
      }
    }
    done = packs * V;
  }
  for (std::int64_t i = done + first; i < n; i += stride) {
    A x[kIn];
    A y[kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) x[k] = load(args.in[k] + (((kBias >> k) & 1u) ? i % cols : i));
    f(x, y);
#pragma unroll
    for (int j = 0; j < kOut; ++j) store(args.out[j] + i, y[j]);
  }
}

// Runs map_kernel over n elements on the compute stream. cols is the length of
// the broadcast inputs (any positive value when kBias is 0).
template <typename T, int kIn, int kOut, unsigned kBias = 0, typename F>
void map(const char* name, F f, const MapArgs<T, kIn, kOut>& args, std::int64_t n, std::int64_t cols = 1) {
  if (n <= 0) return;
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  bool vectorized = kBias == 0 || cols % V == 0;
  for (int k = 0; k < kIn; ++k) vectorized = vectorized && aligned16(args.in[k]);
  for (int j = 0; j < kOut; ++j) vectorized = vectorized && aligned16(args.out[j]);
  const unsigned blocks = blocks_for(vectorized ? (n + V - 1) / V : n, kMapThreads);
  map_kernel<T, kIn, kOut, kBias><<<blocks, kMapThreads, 0, stream()>>>(args, n, cols, vectorized, f);
  check_launch(name);
}

}  // namespace trident::kernels::cuda::detail
