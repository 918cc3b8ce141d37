// Elementwise kernels: binary ops, scale, axpy, bias_add (through detail::map,
// elementwise_map.cuh: grid-stride, 16-byte vectors when aligned) and dtype
// casts. Arithmetic in Acc<T>, one rounding on store, as the CPU kernels.
#include "trident/kernels/cuda/elementwise.h"

#include "trident/kernels/cuda/common.cuh"
#include "trident/kernels/cuda/elementwise_map.cuh"

namespace trident::kernels::cuda {

namespace {

template <typename A>
struct Add {
  __device__ void operator()(const A* x, A* y) const { y[0] = x[0] + x[1]; }
};
template <typename A>
struct Sub {
  __device__ void operator()(const A* x, A* y) const { y[0] = x[0] - x[1]; }
};
template <typename A>
struct Mul {
  __device__ void operator()(const A* x, A* y) const { y[0] = x[0] * x[1]; }
};
template <typename A>
struct Scale {
  A s;
  __device__ void operator()(const A* x, A* y) const { y[0] = x[0] * s; }
};
// x[0] = dst, x[1] = src.
template <typename A>
struct Axpy {
  A alpha;
  __device__ void operator()(const A* x, A* y) const { y[0] = x[0] + alpha * x[1]; }
};

// --- casts ----------------------------------------------------------------------
// One rounding from the source value: f32 and f64 sources round directly
// (__double2bfloat16 and __double2half round f64 once), 16-bit sources are
// exact in f32 and round from there.
template <typename D>
__device__ __forceinline__ D convert_from_float(float v) {
  return to_storage<D>(static_cast<Acc<D>>(v));
}

template <typename D, typename S>
__device__ __forceinline__ D convert(S v) {
  if constexpr (std::is_same_v<S, double>) {
    if constexpr (std::is_same_v<D, __nv_bfloat16>) {
      return __double2bfloat16(v);
    } else if constexpr (std::is_same_v<D, __half>) {
      return __double2half(v);
    } else {
      return static_cast<D>(v);
    }
  } else if constexpr (std::is_same_v<S, float>) {
    return convert_from_float<D>(v);
  } else if constexpr (std::is_same_v<D, double>) {
    return static_cast<double>(load(&v));
  } else {
    return convert_from_float<D>(load(&v));
  }
}

template <typename S, typename D>
__global__ void __launch_bounds__(detail::kMapThreads)
    cast_kernel(const S* src, D* dst, std::int64_t n, bool vectorized) {
  // V elements per step: 16 bytes of the wider type (8 bytes or 16 of the other).
  constexpr int V = 16 / static_cast<int>(sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D));
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t done = 0;
  if (vectorized) {
    const std::int64_t packs = n / V;
    for (std::int64_t p = first; p < packs; p += stride) {
      const auto in = *reinterpret_cast<const detail::Pack<S, V>*>(src + p * V);
      detail::Pack<D, V> out;
#pragma unroll
      for (int e = 0; e < V; ++e) out.v[e] = convert<D>(in.v[e]);
      *reinterpret_cast<detail::Pack<D, V>*>(dst + p * V) = out;
    }
    done = packs * V;
  }
  for (std::int64_t i = done + first; i < n; i += stride) dst[i] = convert<D>(src[i]);
}

}  // namespace

void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, std::int64_t n) {
  dispatch_floating(dtype, "binary", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const detail::MapArgs<T, 2, 1> args{{static_cast<const T*>(a), static_cast<const T*>(b)}, {static_cast<T*>(out)}};
    switch (op) {
      case BinaryOp::add: detail::map("add", Add<A>{}, args, n); break;
      case BinaryOp::sub: detail::map("sub", Sub<A>{}, args, n); break;
      case BinaryOp::mul: detail::map("mul", Mul<A>{}, args, n); break;
    }
  });
}

void scale(DType dtype, const void* a, double s, void* out, std::int64_t n) {
  dispatch_floating(dtype, "scale", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const detail::MapArgs<T, 1, 1> args{{static_cast<const T*>(a)}, {static_cast<T*>(out)}};
    detail::map("scale", Scale<A>{static_cast<A>(s)}, args, n);
  });
}

void axpy(DType dtype, double alpha, const void* src, void* dst, std::int64_t n) {
  dispatch_floating(dtype, "axpy", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    auto* d = static_cast<T*>(dst);
    const detail::MapArgs<T, 2, 1> args{{d, static_cast<const T*>(src)}, {d}};
    detail::map("axpy", Axpy<A>{static_cast<A>(alpha)}, args, n);
  });
}

void bias_add(DType dtype, const void* x, const void* bias, void* out, std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  dispatch_floating(dtype, "bias_add", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const detail::MapArgs<T, 2, 1> args{{static_cast<const T*>(x), static_cast<const T*>(bias)}, {static_cast<T*>(out)}};
    detail::map<T, 2, 1, 0b10u>("bias_add", Add<A>{}, args, rows * cols, cols);
  });
}

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n) {
  if (n <= 0) return;
  if (src_dtype == dst_dtype) {
    check_cuda(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * dtype_size(src_dtype), cudaMemcpyDeviceToDevice,
                               stream()),
               "cast (cudaMemcpyAsync)");
    return;
  }
  dispatch_floating(src_dtype, "cast", [&](auto s_tag) {
    using S = decltype(s_tag);
    dispatch_floating(dst_dtype, "cast", [&](auto d_tag) {
      using D = decltype(d_tag);
      constexpr int V = 16 / static_cast<int>(sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D));
      const bool vectorized = reinterpret_cast<std::uintptr_t>(src) % (sizeof(S) * V) == 0 &&
                              reinterpret_cast<std::uintptr_t>(dst) % (sizeof(D) * V) == 0;
      const unsigned blocks = blocks_for(vectorized ? (n + V - 1) / V : n, detail::kMapThreads);
      cast_kernel<S, D><<<blocks, detail::kMapThreads, 0, stream()>>>(static_cast<const S*>(src), static_cast<D*>(dst),
                                                                        n, vectorized);
      check_launch("cast");
    });
  });
}

}  // namespace trident::kernels::cuda
