// The elementwise side of the CUDA matmul family: broadcast_rows (a bias into C before a beta = 1 GEMM) and
// the kernels matmul.cpp runs around cuBLASLt when it cannot fuse an epilogue (matmul_launch.h): beta·C for
// K = 0, beta·C + bias, GELU-tanh, and the bias gradient Σ_k op(A)[m, k]. Grid-stride loops, one element
// (or one row of the sum) per thread step; Acc<T> arithmetic, one rounding on store.
#include "trident/kernels/cuda/common.cuh"
#include "trident/kernels/cuda/matmul.h"
#include "trident/kernels/cuda/matmul_launch.h"

namespace trident::kernels::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ std::int64_t thread_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t thread_count() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

// Elements are moved as unsigned words of the dtype's size: a copy needs no arithmetic.
template <typename U>
__global__ void __launch_bounds__(kThreads)
    broadcast_rows_kernel(const U* __restrict__ row, U* __restrict__ out, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) out[i] = row[i % cols];
}

template <typename T>
__global__ void __launch_bounds__(kThreads) scale_kernel(T* c, std::int64_t n, Acc<T> beta) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) {
    store(c + i, beta == Acc<T>(0) ? Acc<T>(0) : load(c + i) * beta);
  }
}

// src may alias dst (each element is read and then written by one thread); it is not read when beta = 0.
template <typename T>
__global__ void __launch_bounds__(kThreads) bias_into_kernel(const T* src, const T* __restrict__ bias, T* dst,
                                                             std::int64_t rows, std::int64_t cols, Acc<T> beta) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) {
    const Acc<T> b = load(bias + i % cols);
    store(dst + i, beta == Acc<T>(0) ? b : beta * load(src + i) + b);
  }
}

// 0.5·x·(1 + tanh(u)) = x·sigmoid(2u), u = √(2/π)(x + 0.044715x³): no cancellation for negative x
// (kernels/cpu/activation.cpp evaluates it the same way).
template <typename A>
__device__ __forceinline__ A gelu_tanh(A x) {
  const A u = A(0.79788456080286535588) * (x + A(0.044715) * x * x * x);
  if constexpr (std::is_same_v<A, double>) {
    return x / (1.0 + exp(-2.0 * u));
  } else {
    return x / (1.0f + expf(-2.0f * u));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) gelu_tanh_kernel(const T* x, T* y, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) store(y + i, gelu_tanh(load(x + i)));
}

// out[i] = Σ_k a[k·m + i] (A stored [k, m]): one thread per output, coalesced along i, k in order.
template <typename TA, typename TO>
__global__ void __launch_bounds__(kThreads)
    sum_columns_kernel(const TA* __restrict__ a, TO* __restrict__ out, std::int64_t m, std::int64_t k) {
  for (std::int64_t i = thread_index(); i < m; i += thread_count()) {
    Acc<TA> s = 0;
    for (std::int64_t j = 0; j < k; ++j) s += load(a + j * m + i);
    store(out + i, static_cast<Acc<TO>>(s));
  }
}

// out[i] = Σ_k a[i·k + j] (A stored [m, k]): one warp per row, lane partial sums then a fixed shuffle tree.
template <typename TA, typename TO>
__global__ void __launch_bounds__(kThreads)
    sum_rows_kernel(const TA* __restrict__ a, TO* __restrict__ out, std::int64_t m, std::int64_t k) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const std::int64_t warps = thread_count() / 32;
  for (std::int64_t i = thread_index() / 32; i < m; i += warps) {
    Acc<TA> s = 0;
    for (std::int64_t j = lane; j < k; j += 32) s += load(a + i * k + j);
    s = warp_sum(s);
    if (lane == 0) store(out + i, static_cast<Acc<TO>>(s));
  }
}

}  // namespace

void broadcast_rows(DType dtype, const void* row, void* out, std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  const unsigned blocks = blocks_for(rows * cols, kThreads);
  auto run = [&](auto word) {
    using U = decltype(word);
    broadcast_rows_kernel<U>
        <<<blocks, kThreads, 0, stream()>>>(static_cast<const U*>(row), static_cast<U*>(out), rows, cols);
  };
  switch (dtype_size(dtype)) {
    case 1:
      run(std::uint8_t{});
      break;
    case 2:
      run(std::uint16_t{});
      break;
    case 4:
      run(std::uint32_t{});
      break;
    case 8:
      run(std::uint64_t{});
      break;
    default:
      unsupported_dtype("broadcast_rows", dtype, "a dtype of 1, 2, 4 or 8 bytes");
  }
  check_launch("broadcast_rows");
}

void launch_scale_matrix(DType dtype, void* c, std::int64_t count, double beta) {
  if (count <= 0) return;
  dispatch_floating(dtype, "matmul (scale C)", [&](auto tag) {
    using T = decltype(tag);
    scale_kernel<T>
        <<<blocks_for(count, kThreads), kThreads, 0, stream()>>>(static_cast<T*>(c), count, static_cast<Acc<T>>(beta));
  });
  check_launch("matmul (scale C)");
}

void launch_bias_into(DType dtype, const void* src, const void* bias, void* dst, std::int64_t rows, std::int64_t cols,
                      double beta) {
  if (rows <= 0 || cols <= 0) return;
  dispatch_floating(dtype, "matmul (bias)", [&](auto tag) {
    using T = decltype(tag);
    bias_into_kernel<T><<<blocks_for(rows * cols, kThreads), kThreads, 0, stream()>>>(
        static_cast<const T*>(src), static_cast<const T*>(bias), static_cast<T*>(dst), rows, cols,
        static_cast<Acc<T>>(beta));
  });
  check_launch("matmul (bias)");
}

void launch_gelu_tanh(DType dtype, const void* x, void* y, std::int64_t n) {
  if (n <= 0) return;
  dispatch_floating(dtype, "matmul (gelu_tanh)", [&](auto tag) {
    using T = decltype(tag);
    gelu_tanh_kernel<T>
        <<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
  });
  check_launch("matmul (gelu_tanh)");
}

void launch_sum_over_k(DType a_dtype, DType out_dtype, const void* a, void* out, std::int64_t m, std::int64_t k,
                       bool trans) {
  if (m <= 0) return;
  auto run = [&](auto a_tag, auto out_tag) {
    using TA = decltype(a_tag);
    using TO = decltype(out_tag);
    if (trans) {
      sum_columns_kernel<TA, TO>
          <<<blocks_for(m, kThreads), kThreads, 0, stream()>>>(static_cast<const TA*>(a), static_cast<TO*>(out), m, k);
    } else {
      sum_rows_kernel<TA, TO><<<blocks_for(m * 32, kThreads), kThreads, 0, stream()>>>(static_cast<const TA*>(a),
                                                                                       static_cast<TO*>(out), m, k);
    }
  };
  dispatch_floating(a_dtype, "matmul (bias gradient)", [&](auto a_tag) {
    using TA = decltype(a_tag);
    if (out_dtype == a_dtype) {
      run(a_tag, TA{});
    } else if (out_dtype == DType::f32) {
      run(a_tag, float{});
    } else {
      unsupported_dtype("matmul (bias gradient)", out_dtype, "the dtype of A, or f32");
    }
  });
  check_launch("matmul (bias gradient)");
}

}  // namespace trident::kernels::cuda
