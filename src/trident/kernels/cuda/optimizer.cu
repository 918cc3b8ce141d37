// Optimizer kernels (semantics: kernels/cpu/optimizer.h).
//
// AdamW and SGD are elementwise over flat arrays: grid-stride loops, one thread
// per element at a time. The per-step scalars are formed on the host exactly as
// the CPU kernel forms them (f64, then rounded to the parameter's type) and the
// per-element operations are the CPU's, in the same order (nvcc may fuse a
// multiply and an add, so results agree to an ulp or so, not bit for bit).
// Kernels are instantiated per (param, grad) type; the optional copy's dtype is
// a uniform run-time switch at the store, which costs nothing next to memory.
//
// adamw_step_multi runs the same element update over a device-side table of
// chunks, one block per chunk (apex's multi_tensor_apply).
//
// sum_of_squares: at most kSumBlocks blocks (a number that depends on n only)
// sum squares in f64 over grid-stride loops, reduce in a fixed tree and write
// one partial each; one block then adds the partials in a fixed tree.
#include "trident/kernels/cuda/optimizer.h"

#include <cmath>

#include "trident/kernels/cuda/common.cuh"
#include "trident/kernels/cuda/optimizer_launch.h"

namespace trident::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kChunkThreads = 512;
constexpr int kSumThreads = 256;
constexpr int kSumBlocks = 1024;  // also the finishing block's thread count

// The per-step scalars, formed in f64 and rounded to P, as kernels/cpu/optimizer.cpp's AdamWScalars.
template <typename P>
struct AdamWScalars {
  P grad_scale, decay, w1, one_minus_w1, beta2, c2, bc2_sqrt, eps, neg_step_size;
  bool small_weight;
};

template <typename P>
AdamWScalars<P> adamw_scalars(const AdamWHyper& h) {
  const double t = static_cast<double>(h.step);
  const double bias_correction1 = h.bias_correction ? 1.0 - std::pow(h.beta1, t) : 1.0;
  const double bias_correction2 = h.bias_correction ? 1.0 - std::pow(h.beta2, t) : 1.0;
  AdamWScalars<P> s;
  s.grad_scale = static_cast<P>(h.grad_scale);
  s.decay = static_cast<P>(1.0 - h.lr * h.weight_decay);
  s.w1 = static_cast<P>(1.0 - h.beta1);
  s.one_minus_w1 = P(1) - s.w1;
  s.small_weight = std::fabs(1.0 - h.beta1) < 0.5;
  s.beta2 = static_cast<P>(h.beta2);
  s.c2 = static_cast<P>(1.0 - h.beta2);
  s.bc2_sqrt = static_cast<P>(std::sqrt(bias_correction2));
  s.eps = static_cast<P>(h.eps);
  s.neg_step_size = static_cast<P>(-(h.lr / bias_correction1));
  return s;
}

template <typename P>
__device__ __forceinline__ P sqrt_p(P v) {
  if constexpr (std::is_same_v<P, double>) {
    return sqrt(v);
  } else {
    return sqrtf(v);
  }
}

// copy[i] = p rounded once to copy_dtype (checked to be floating on the host).
template <typename P>
__device__ __forceinline__ void store_copy(void* copy, DType copy_dtype, std::int64_t i, P p) {
  switch (copy_dtype) {
    case DType::f32: static_cast<float*>(copy)[i] = static_cast<float>(p); break;
    case DType::f64: static_cast<double*>(copy)[i] = static_cast<double>(p); break;
    case DType::bf16:
      if constexpr (std::is_same_v<P, double>) {
        static_cast<__nv_bfloat16*>(copy)[i] = __double2bfloat16(p);
      } else {
        static_cast<__nv_bfloat16*>(copy)[i] = __float2bfloat16_rn(p);
      }
      break;
    case DType::f16:
      if constexpr (std::is_same_v<P, double>) {
        static_cast<__half*>(copy)[i] = __double2half(p);
      } else {
        static_cast<__half*>(copy)[i] = __float2half_rn(p);
      }
      break;
    default: break;
  }
}

// PyTorch's single-tensor AdamW for element i (kernels/cpu/optimizer.h).
template <typename P, typename G>
__device__ __forceinline__ void adamw_element(const AdamWScalars<P>& s, P* __restrict__ param,
                                              const G* __restrict__ grad, P* __restrict__ m_state,
                                              P* __restrict__ v_state, void* copy, DType copy_dtype, std::int64_t i) {
  const P g = static_cast<P>(load(grad + i)) * s.grad_scale;
  P p = param[i] * s.decay;
  P m = m_state[i];
  m = s.small_weight ? m + s.w1 * (g - m) : g - (g - m) * s.one_minus_w1;
  const P v = v_state[i] * s.beta2 + (s.c2 * g) * g;
  const P denom = sqrt_p(v) / s.bc2_sqrt + s.eps;
  p = p + (s.neg_step_size * m) / denom;
  param[i] = p;
  m_state[i] = m;
  v_state[i] = v;
  if (copy != nullptr) store_copy(copy, copy_dtype, i, p);
}

template <typename P, typename G>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(AdamWScalars<P> s, P* __restrict__ param, const G* __restrict__ grad, P* __restrict__ exp_avg,
                 P* __restrict__ exp_avg_sq, void* copy, DType copy_dtype, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    adamw_element(s, param, grad, exp_avg, exp_avg_sq, copy, copy_dtype, i);
  }
}

// One block per chunk of the table.
template <typename P, typename G>
__global__ void __launch_bounds__(kChunkThreads)
    adamw_multi_kernel(AdamWScalars<P> s, const detail::AdamWChunk* __restrict__ chunks, DType copy_dtype) {
  const detail::AdamWChunk c = chunks[blockIdx.x];
  auto* param = static_cast<P*>(c.param);
  const auto* grad = static_cast<const G*>(c.grad);
  auto* m = static_cast<P*>(c.exp_avg);
  auto* v = static_cast<P*>(c.exp_avg_sq);
  for (std::int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
    adamw_element(s, param, grad, m, v, c.param_copy, copy_dtype, i);
  }
}

template <typename P>
struct SgdScalars {
  P grad_scale, weight_decay, momentum, damp, neg_lr;
  bool use_weight_decay, use_momentum, nesterov, init_buf;
};

// PyTorch's SGD (kernels/cpu/optimizer.h).
template <typename P, typename G>
__global__ void __launch_bounds__(kThreads)
    sgd_kernel(SgdScalars<P> s, P* __restrict__ param, const G* __restrict__ grad, P* __restrict__ buf,
               std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    P g = static_cast<P>(load(grad + i)) * s.grad_scale;
    if (s.use_weight_decay) g = g + s.weight_decay * param[i];
    if (s.use_momentum) {
      const P b = s.init_buf ? g : buf[i] * s.momentum + s.damp * g;
      buf[i] = b;
      g = s.nesterov ? g + s.momentum * b : b;
    }
    param[i] = param[i] + s.neg_lr * g;
  }
}

template <typename T>
__global__ void __launch_bounds__(kSumThreads)
    sum_of_squares_partial_kernel(const T* __restrict__ x, std::int64_t n, double* __restrict__ partial) {
  __shared__ double red[32];
  double s = 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const auto v = static_cast<double>(load(x + i));
    s += v * v;
  }
  s = block_sum(s, red);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kSumBlocks)
    sum_partials_kernel(const double* __restrict__ partial, int count, double* __restrict__ total) {
  __shared__ double red[32];
  const double s = static_cast<int>(threadIdx.x) < count ? partial[threadIdx.x] : 0.0;
  const double t = block_sum(s, red);
  if (threadIdx.x == 0) *total = t;
}

// Calls f(P{}) for the parameter types f32 and f64.
template <typename F>
void dispatch_param(DType dtype, const char* kernel, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); return;
    case DType::f64: f(double{}); return;
    default: unsupported_dtype(kernel, dtype, "f32 or f64 parameters");
  }
}

void check_copy_dtype(DType copy_dtype, const char* kernel) {
  switch (copy_dtype) {
    case DType::f32:
    case DType::f64:
    case DType::bf16:
    case DType::f16: return;
    default: unsupported_dtype(kernel, copy_dtype, "a floating type for param_copy");
  }
}

}  // namespace

void adamw_step(DType param_dtype, DType grad_dtype, DType copy_dtype, void* param, const void* grad, void* exp_avg,
                void* exp_avg_sq, void* param_copy, std::int64_t n, const AdamWHyper& hyper) {
  constexpr const char* kernel = "adamw_step";
  dispatch_param(param_dtype, kernel, [&](auto p_tag) {
    using P = decltype(p_tag);
    dispatch_floating(grad_dtype, kernel, [&](auto g_tag) {
      using G = decltype(g_tag);
      if (param_copy != nullptr) check_copy_dtype(copy_dtype, kernel);
      if (n <= 0) return;
      adamw_kernel<P, G><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(
          adamw_scalars<P>(hyper), static_cast<P*>(param), static_cast<const G*>(grad), static_cast<P*>(exp_avg),
          static_cast<P*>(exp_avg_sq), param_copy, copy_dtype, n);
      check_launch(kernel);
    });
  });
}

void sgd_step(DType param_dtype, DType grad_dtype, void* param, const void* grad, void* momentum_buf, bool init_buf,
              std::int64_t n, double lr, double momentum, double weight_decay, double dampening, bool nesterov,
              double grad_scale) {
  constexpr const char* kernel = "sgd_step";
  dispatch_param(param_dtype, kernel, [&](auto p_tag) {
    using P = decltype(p_tag);
    dispatch_floating(grad_dtype, kernel, [&](auto g_tag) {
      using G = decltype(g_tag);
      if (n <= 0) return;
      SgdScalars<P> s;
      s.grad_scale = static_cast<P>(grad_scale);
      s.weight_decay = static_cast<P>(weight_decay);
      s.momentum = static_cast<P>(momentum);
      s.damp = static_cast<P>(1.0 - dampening);
      s.neg_lr = static_cast<P>(-lr);
      s.use_weight_decay = weight_decay != 0;
      s.use_momentum = momentum != 0;
      s.nesterov = nesterov;
      s.init_buf = init_buf;
      sgd_kernel<P, G><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(
          s, static_cast<P*>(param), static_cast<const G*>(grad), static_cast<P*>(momentum_buf), n);
      check_launch(kernel);
    });
  });
}

namespace detail {

void launch_adamw_step_multi(DType param_dtype, DType grad_dtype, DType copy_dtype, const AdamWChunk* host_chunks,
                             AdamWChunk* device_chunks, std::size_t count, const cpu::AdamWHyper& hyper) {
  constexpr const char* kernel = "adamw_step_multi";
  dispatch_param(param_dtype, kernel, [&](auto p_tag) {
    using P = decltype(p_tag);
    dispatch_floating(grad_dtype, kernel, [&](auto g_tag) {
      using G = decltype(g_tag);
      bool any_copy = false;
      for (std::size_t k = 0; k < count; ++k) any_copy = any_copy || host_chunks[k].param_copy != nullptr;
      if (any_copy) check_copy_dtype(copy_dtype, kernel);
      if (count == 0) return;
      if (count > 0x7fffffffu) throw_error("CUDA adamw_step_multi: more than 2^31 - 1 chunks");
      // From pageable memory: staged before cudaMemcpyAsync returns, so the host table may go right after.
      check_cuda(cudaMemcpyAsync(device_chunks, host_chunks, count * sizeof(AdamWChunk), cudaMemcpyHostToDevice,
                                 stream()),
                 "adamw_step_multi: chunk table copy");
      adamw_multi_kernel<P, G><<<static_cast<unsigned>(count), kChunkThreads, 0, stream()>>>(adamw_scalars<P>(hyper),
                                                                                             device_chunks, copy_dtype);
      check_launch(kernel);
    });
  });
}

std::size_t sum_of_squares_scratch_bytes() { return (kSumBlocks + 1) * sizeof(double); }

double launch_sum_of_squares(DType dtype, const void* x, std::int64_t n, void* scratch) {
  constexpr const char* kernel = "sum_of_squares";
  double total = 0;
  dispatch_floating(dtype, kernel, [&](auto tag) {
    using T = decltype(tag);
    if (n <= 0) return;
    auto* partial = static_cast<double*>(scratch);
    double* device_total = partial + kSumBlocks;
    const std::int64_t wanted = (n + 4 * kSumThreads - 1) / (4 * kSumThreads);  // about 4 elements per thread
    const int blocks = static_cast<int>(wanted < kSumBlocks ? wanted : kSumBlocks);
    sum_of_squares_partial_kernel<T><<<blocks, kSumThreads, 0, stream()>>>(static_cast<const T*>(x), n, partial);
    check_launch(kernel);
    sum_partials_kernel<<<1, kSumBlocks, 0, stream()>>>(partial, blocks, device_total);
    check_launch(kernel);
    check_cuda(cudaMemcpyAsync(&total, device_total, sizeof(double), cudaMemcpyDeviceToHost, stream()), kernel);
    synchronize_stream(kernel);
  });
  return total;
}

}  // namespace detail

}  // namespace trident::kernels::cuda
