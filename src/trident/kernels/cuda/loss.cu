// Cross-entropy kernels (semantics: kernels/cpu/loss.h).
//
// One 512-thread block per row (grid-stride over rows). The forward reads the
// logits once: every thread keeps an online (max, Σ exp(x − max)) pair over its
// elements, rescaling the sum when the max grows, and the block merges the
// pairs; lse = max + log(sum). The backward reads the row once more and writes
// dlogits = (exp(x − lse) − onehot) · grad straight from the logits: no
// probabilities are stored. Rows are read 16 bytes at a time from the first
// 16-byte boundary on (and written so when dlogits shares the logits'
// alignment). exp/log are the CUDA math library's (within 2 ulp in f32; the
// CPU uses its own polynomial exp), so results agree with the CPU to a few ulp.
// The vocabulary-parallel kernels run the same row loops over one rank's slice.
#include "trident/kernels/cuda/loss.h"

#include <climits>
#include <cstdint>

#include "trident/kernels/cuda/common.cuh"
#include "trident/kernels/cuda/loss_launch.h"

namespace trident::kernels::cuda {

namespace {

constexpr int kRowThreads = 512;
constexpr int kFlatThreads = 256;

// --- row access ---------------------------------------------------------------

template <typename T>
struct alignas(16) Pack16 {
  T v[16 / sizeof(T)];
};

// Elements of p before its first 16-byte boundary (at most n); n when p is not
// even element-aligned, so that everything goes element by element.
template <typename T>
__device__ __forceinline__ std::int64_t head_to_16(const T* p, std::int64_t n) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (a % sizeof(T) != 0) return n;
  const auto h = static_cast<std::int64_t>(((16 - a % 16) % 16) / sizeof(T));
  return h < n ? h : n;
}

// Calls f(j, row[j]) (value in Acc<T>) once for every j < n, spread over the block's threads.
template <typename T, typename F>
__device__ __forceinline__ void for_each_in_row(const T* row, std::int64_t n, F&& f) {
  constexpr int V = 16 / sizeof(T);
  const std::int64_t head = head_to_16(row, n);
  const std::int64_t packs = (n - head) / V;
  const auto* body = reinterpret_cast<const Pack16<T>*>(row + head);
  for (std::int64_t j = threadIdx.x; j < head; j += blockDim.x) f(j, load(row + j));
  for (std::int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack16<T> pk = body[p];
#pragma unroll
    for (int e = 0; e < V; ++e) f(head + p * V + e, load(&pk.v[e]));
  }
  for (std::int64_t j = head + packs * V + threadIdx.x; j < n; j += blockDim.x) f(j, load(row + j));
}

// out[j] = g(j, in[j]) rounded once to T, for every j < n, spread over the block's threads;
// 16-byte loads and stores when in and out have the same offset from a 16-byte boundary.
template <typename T, typename G>
__device__ __forceinline__ void map_row(const T* in, T* out, std::int64_t n, G&& g) {
  constexpr int V = 16 / sizeof(T);
  const bool same_phase = reinterpret_cast<std::uintptr_t>(in) % 16 == reinterpret_cast<std::uintptr_t>(out) % 16;
  const std::int64_t head = same_phase ? head_to_16(in, n) : n;
  const std::int64_t packs = (n - head) / V;
  const auto* body_in = reinterpret_cast<const Pack16<T>*>(in + head);
  auto* body_out = reinterpret_cast<Pack16<T>*>(out + head);
  for (std::int64_t j = threadIdx.x; j < head; j += blockDim.x) out[j] = to_storage<T>(g(j, load(in + j)));
  for (std::int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack16<T> pk = body_in[p];
    Pack16<T> res;
#pragma unroll
    for (int e = 0; e < V; ++e) res.v[e] = to_storage<T>(g(head + p * V + e, load(&pk.v[e])));
    body_out[p] = res;
  }
  for (std::int64_t j = head + packs * V + threadIdx.x; j < n; j += blockDim.x) {
    out[j] = to_storage<T>(g(j, load(in + j)));
  }
}

template <typename T>
__device__ __forceinline__ void zero_row(T* out, std::int64_t n) {
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) out[j] = to_storage<T>(Acc<T>(0));
}

// --- online softmax statistics ------------------------------------------------

// max m of the elements seen and s = Σ exp(x − m); m = -inf, s = 0 for none.
// m is never NaN (comparisons skip NaN, as the CPU's max does); a NaN element makes s NaN.
template <typename A>
struct MaxSum {
  A m;
  A s;
};

template <typename A>
__device__ __forceinline__ void online_add(MaxSum<A>& st, A v) {
  if (v > st.m) {
    st.s = st.s * exp_acc(st.m - v) + A(1);
    st.m = v;
  } else if (v != A(-INFINITY)) {  // exp(-inf − m) adds 0; skipping it keeps -inf − -inf (NaN) out
    st.s += exp_acc(v - st.m);
  }
}

// Commutative bit for bit (max, products and one IEEE addition), so the butterfly
// below leaves the same pair in every lane.
template <typename A>
__device__ __forceinline__ MaxSum<A> merge(MaxSum<A> a, MaxSum<A> b) {
  const A m = a.m > b.m ? a.m : b.m;
  if (m == A(-INFINITY)) return {m, a.s + b.s};
  return {m, a.s * exp_acc(a.m - m) + b.s * exp_acc(b.m - m)};
}

template <typename A>
__device__ __forceinline__ MaxSum<A> warp_merge(MaxSum<A> st) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum<A> other{__shfl_xor_sync(0xffffffffu, st.m, offset), __shfl_xor_sync(0xffffffffu, st.s, offset)};
    st = merge(st, other);
  }
  return st;
}

// The block's pair, returned to every thread; `red` is 32 pairs of shared memory,
// reusable when this returns (it synchronises the block).
template <typename A>
__device__ __forceinline__ MaxSum<A> block_merge(MaxSum<A> st, MaxSum<A>* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  st = warp_merge(st);
  if (lane == 0) red[warp] = st;
  __syncthreads();
  st = lane < warps ? red[lane] : MaxSum<A>{A(-INFINITY), A(0)};
  st = warp_merge(st);
  __syncthreads();
  return st;
}

// --- kernels --------------------------------------------------------------------

template <typename T, typename I>
__global__ void __launch_bounds__(kRowThreads)
    cross_entropy_forward_kernel(const T* __restrict__ logits, const I* __restrict__ targets,
                                 Acc<T>* __restrict__ losses, Acc<T>* __restrict__ lse, std::int64_t rows,
                                 std::int64_t vocab, std::int64_t ignore_index) {
  using A = Acc<T>;
  __shared__ MaxSum<A> red[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = logits + r * vocab;
    MaxSum<A> st{A(-INFINITY), A(0)};
    for_each_in_row(row, vocab, [&](std::int64_t, A v) { online_add(st, v); });
    st = block_merge(st, red);
    if (threadIdx.x == 0) {
      const A log_sum = log_acc(st.s);
      lse[r] = st.m + log_sum;
      const auto t = static_cast<std::int64_t>(targets[r]);
      // (max − x[t]) + log_sum, as the CPU: accurate when the logits are large.
      A loss = A(NAN);  // a target outside the row (ops:: rejects those) reads nothing
      if (t == ignore_index) {
        loss = A(0);
      } else if (t >= 0 && t < vocab) {
        loss = (st.m - load(row + t)) + log_sum;
      }
      losses[r] = loss;
    }
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kRowThreads)
    cross_entropy_backward_kernel(const T* __restrict__ logits, const I* __restrict__ targets,
                                  const Acc<T>* __restrict__ lse, const Acc<T>* __restrict__ grad_losses,
                                  T* __restrict__ dlogits, std::int64_t rows, std::int64_t vocab,
                                  std::int64_t ignore_index) {
  using A = Acc<T>;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* drow = dlogits + r * vocab;
    const auto t = static_cast<std::int64_t>(targets[r]);
    if (t == ignore_index) {
      zero_row(drow, vocab);
      continue;
    }
    const A l = lse[r], g = grad_losses[r];
    map_row(logits + r * vocab, drow, vocab, [&](std::int64_t j, A v) {
      const A e = exp_acc(v - l);
      return j == t ? (e - A(1)) * g : e * g;
    });
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kRowThreads)
    vocab_parallel_forward_kernel(const T* __restrict__ logits, const I* __restrict__ targets,
                                  Acc<T>* __restrict__ row_max, Acc<T>* __restrict__ target_logit,
                                  Acc<T>* __restrict__ sum_exp, std::int64_t rows, std::int64_t cols,
                                  std::int64_t valid, std::int64_t vocab_begin, std::int64_t ignore_index) {
  using A = Acc<T>;
  __shared__ MaxSum<A> red[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const auto t = static_cast<std::int64_t>(targets[r]);
    if (t == ignore_index) {  // uniform over the block: no thread reaches block_merge
      // 0, not -inf: every rank writes it, so the group's max is 0 and the rebase factor exp(0) = 1.
      if (threadIdx.x == 0) row_max[r] = target_logit[r] = sum_exp[r] = A(0);
      continue;
    }
    const T* row = logits + r * cols;
    MaxSum<A> st{A(-INFINITY), A(0)};  // stays so for an all-padding slice: sum 0
    for_each_in_row(row, valid, [&](std::int64_t, A v) { online_add(st, v); });
    st = block_merge(st, red);
    if (threadIdx.x == 0) {
      row_max[r] = st.m;
      sum_exp[r] = st.s;
      const std::int64_t local = t - vocab_begin;
      target_logit[r] = local >= 0 && local < valid ? load(row + local) : A(0);
    }
  }
}

template <typename A>
__global__ void __launch_bounds__(kFlatThreads)
    vocab_parallel_rebase_kernel(A* __restrict__ sum_exp, const A* __restrict__ row_max,
                                 const A* __restrict__ group_max, std::int64_t rows) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    sum_exp[r] *= exp_acc(row_max[r] - group_max[r]);
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kRowThreads)
    vocab_parallel_backward_kernel(const T* __restrict__ logits, const I* __restrict__ targets,
                                   const Acc<T>* __restrict__ group_max, const Acc<T>* __restrict__ group_sum,
                                   Acc<T> scale, T* __restrict__ dlogits, std::int64_t rows, std::int64_t cols,
                                   std::int64_t valid, std::int64_t vocab_begin, std::int64_t ignore_index) {
  using A = Acc<T>;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* drow = dlogits + r * cols;
    const auto t = static_cast<std::int64_t>(targets[r]);
    if (t == ignore_index) {
      zero_row(drow, cols);
      continue;
    }
    // exp(z − M) · (scale / S): one division per row, as the CPU.
    const A m = group_max[r], c = scale / group_sum[r];
    const std::int64_t local = t - vocab_begin;
    map_row(logits + r * cols, drow, valid, [&](std::int64_t j, A v) {
      const A e = exp_acc(v - m) * c;
      return j == local ? e - scale : e;
    });
    zero_row(drow + valid, cols - valid);
  }
}

__global__ void count_targets_init_kernel(unsigned long long* count, long long* first_bad) {
  *count = 0;
  *first_bad = LLONG_MAX;
}

// count += rows whose target is valid; first_bad = min over rows whose target is neither ignored nor valid.
template <typename I>
__global__ void __launch_bounds__(kFlatThreads)
    count_targets_kernel(const I* __restrict__ targets, std::int64_t rows, std::int64_t vocab,
                         std::int64_t ignore_index, unsigned long long* count, long long* first_bad) {
  __shared__ long long red[32];
  long long n = 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows; i += stride) {
    const auto t = static_cast<std::int64_t>(targets[i]);
    if (t == ignore_index) continue;
    if (t < 0 || t >= vocab) {
      atomicMin(first_bad, static_cast<long long>(i));
    } else {
      ++n;
    }
  }
  n = block_sum(n, red);
  if (threadIdx.x == 0 && n != 0) atomicAdd(count, static_cast<unsigned long long>(n));
}

unsigned row_blocks(std::int64_t rows) { return blocks_for(rows, 1); }

}  // namespace

void cross_entropy_forward(DType dtype, DType target_dtype, const void* logits, const void* targets, void* losses,
                           void* lse, std::int64_t rows, std::int64_t vocab, std::int64_t ignore_index) {
  constexpr const char* kernel = "cross_entropy";
  dispatch_floating(dtype, kernel, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    dispatch_index(target_dtype, kernel, [&](auto index_tag) {
      using I = decltype(index_tag);
      if (rows <= 0) return;
      cross_entropy_forward_kernel<T, I><<<row_blocks(rows), kRowThreads, 0, stream()>>>(
          static_cast<const T*>(logits), static_cast<const I*>(targets), static_cast<A*>(losses),
          static_cast<A*>(lse), rows, vocab, ignore_index);
      check_launch(kernel);
    });
  });
}

void cross_entropy_backward(DType dtype, DType target_dtype, const void* logits, const void* targets, const void* lse,
                            const void* grad_losses, void* dlogits, std::int64_t rows, std::int64_t vocab,
                            std::int64_t ignore_index) {
  constexpr const char* kernel = "cross_entropy_backward";
  dispatch_floating(dtype, kernel, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    dispatch_index(target_dtype, kernel, [&](auto index_tag) {
      using I = decltype(index_tag);
      if (rows <= 0 || vocab <= 0) return;
      cross_entropy_backward_kernel<T, I><<<row_blocks(rows), kRowThreads, 0, stream()>>>(
          static_cast<const T*>(logits), static_cast<const I*>(targets), static_cast<const A*>(lse),
          static_cast<const A*>(grad_losses), static_cast<T*>(dlogits), rows, vocab, ignore_index);
      check_launch(kernel);
    });
  });
}

void vocab_parallel_forward(DType dtype, DType target_dtype, const void* logits, const void* targets, void* row_max,
                            void* target_logit, void* sum_exp, std::int64_t rows, std::int64_t cols,
                            std::int64_t valid, std::int64_t vocab_begin, std::int64_t ignore_index) {
  constexpr const char* kernel = "vocab_parallel_cross_entropy";
  if (valid < 0 || valid > cols) throw_error("CUDA vocab_parallel_cross_entropy: valid columns outside [0, cols]");
  dispatch_floating(dtype, kernel, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    dispatch_index(target_dtype, kernel, [&](auto index_tag) {
      using I = decltype(index_tag);
      if (rows <= 0) return;
      vocab_parallel_forward_kernel<T, I><<<row_blocks(rows), kRowThreads, 0, stream()>>>(
          static_cast<const T*>(logits), static_cast<const I*>(targets), static_cast<A*>(row_max),
          static_cast<A*>(target_logit), static_cast<A*>(sum_exp), rows, cols, valid, vocab_begin, ignore_index);
      check_launch(kernel);
    });
  });
}

void vocab_parallel_rebase_sums(DType acc, void* sum_exp, const void* row_max, const void* group_max,
                                std::int64_t rows) {
  constexpr const char* kernel = "vocab_parallel_rebase_sums";
  auto run = [&](auto tag) {
    using A = decltype(tag);
    if (rows <= 0) return;
    vocab_parallel_rebase_kernel<A><<<blocks_for(rows, kFlatThreads), kFlatThreads, 0, stream()>>>(
        static_cast<A*>(sum_exp), static_cast<const A*>(row_max), static_cast<const A*>(group_max), rows);
    check_launch(kernel);
  };
  switch (acc) {
    case DType::f32: run(float{}); return;
    case DType::f64: run(double{}); return;
    default: unsupported_dtype(kernel, acc, "f32 or f64");
  }
}

void vocab_parallel_backward(DType dtype, DType target_dtype, const void* logits, const void* targets,
                             const void* group_max, const void* group_sum, double scale, void* dlogits,
                             std::int64_t rows, std::int64_t cols, std::int64_t valid, std::int64_t vocab_begin,
                             std::int64_t ignore_index) {
  constexpr const char* kernel = "vocab_parallel_cross_entropy_backward";
  if (valid < 0 || valid > cols) {
    throw_error("CUDA vocab_parallel_cross_entropy_backward: valid columns outside [0, cols]");
  }
  dispatch_floating(dtype, kernel, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    dispatch_index(target_dtype, kernel, [&](auto index_tag) {
      using I = decltype(index_tag);
      if (rows <= 0 || cols <= 0) return;
      vocab_parallel_backward_kernel<T, I><<<row_blocks(rows), kRowThreads, 0, stream()>>>(
          static_cast<const T*>(logits), static_cast<const I*>(targets), static_cast<const A*>(group_max),
          static_cast<const A*>(group_sum), static_cast<A>(scale), static_cast<T*>(dlogits), rows, cols, valid,
          vocab_begin, ignore_index);
      check_launch(kernel);
    });
  });
}

namespace detail {

std::int64_t launch_count_targets(DType target_dtype, const void* targets, std::int64_t rows, std::int64_t vocab,
                                  std::int64_t ignore_index, std::int64_t* bad_row, std::int64_t* bad_target,
                                  void* scratch) {
  constexpr const char* kernel = "count_targets";
  std::int64_t result = 0;
  dispatch_index(target_dtype, kernel, [&](auto index_tag) {
    using I = decltype(index_tag);
    if (rows <= 0) return;
    auto* count = static_cast<unsigned long long*>(scratch);
    auto* first_bad = reinterpret_cast<long long*>(count + 1);
    const auto* tg = static_cast<const I*>(targets);
    count_targets_init_kernel<<<1, 1, 0, stream()>>>(count, first_bad);
    check_launch(kernel);
    count_targets_kernel<I><<<blocks_for(rows, kFlatThreads), kFlatThreads, 0, stream()>>>(tg, rows, vocab,
                                                                                          ignore_index, count,
                                                                                          first_bad);
    check_launch(kernel);
    long long host[2] = {0, 0};
    check_cuda(cudaMemcpyAsync(host, scratch, sizeof(host), cudaMemcpyDeviceToHost, stream()), kernel);
    synchronize_stream(kernel);
    if (host[1] == LLONG_MAX) {
      result = static_cast<std::int64_t>(host[0]);
      return;
    }
    I value{};
    check_cuda(cudaMemcpyAsync(&value, tg + host[1], sizeof(I), cudaMemcpyDeviceToHost, stream()), kernel);
    synchronize_stream(kernel);
    *bad_row = static_cast<std::int64_t>(host[1]);
    *bad_target = static_cast<std::int64_t>(value);
    result = -1;
  });
  return result;
}

}  // namespace detail

}  // namespace trident::kernels::cuda
