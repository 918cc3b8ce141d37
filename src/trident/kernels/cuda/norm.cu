// LayerNorm / RMSNorm kernels (semantics: kernels/cpu/norm.h).
//
// A row is owned by one warp when it has at most kWarpMaxCols columns (eight
// owners per 256-thread block), otherwise by a whole 512-thread block. The
// owner's threads stride over the columns; the passes after the first re-read
// the row from L1/L2. Statistics follow the CPU kernel: LayerNorm's corrected
// two-pass mean and variance, rstd = 1 / sqrt(var + eps) with IEEE sqrt and
// division, all in Acc<T>; outputs are rounded once.
//
// Backward: the rows are cut into chunks (at most kWarpChunks or kBlockChunks,
// depending on the width); one owner takes a chunk's rows in order, writes dx
// and accumulates dy·xhat (and dy for LayerNorm's bias) per column into the
// chunk's row of a scratch buffer, each column by one thread only. A second
// kernel sums the chunk rows of every column in a fixed order in f64 and rounds
// once, as the CPU combines its blocks. No atomics anywhere: every run gives
// the same bits.
#include "trident/kernels/cuda/norm.h"

#include <climits>

#include "trident/kernels/cuda/common.cuh"
#include "trident/kernels/cuda/norm_launch.h"

namespace trident::kernels::cuda {

namespace {

constexpr std::int64_t kWarpMaxCols = 1024;
constexpr int kWarpBlockThreads = 256;  // eight warp owners per block
constexpr int kRowBlockThreads = 512;
constexpr std::int64_t kWarpChunks = 2048;  // backward row chunks, at most, for warp owners
constexpr std::int64_t kBlockChunks = 256;  // ... and for block owners
constexpr int kCombineGroups = 16;          // combine_partials: blockDim = (32, kCombineGroups)

bool warp_owned(std::int64_t cols) { return cols <= kWarpMaxCols; }

struct ChunkPlan {
  std::int64_t chunk_rows = 0;
  std::int64_t chunks = 0;
};

// Depends on rows and cols only; every chunk holds at least one row.
ChunkPlan chunk_plan(std::int64_t rows, std::int64_t cols) {
  if (rows <= 0) return {};
  const std::int64_t target = warp_owned(cols) ? kWarpChunks : kBlockChunks;
  ChunkPlan p;
  p.chunk_rows = (rows + target - 1) / target;
  p.chunks = (rows + p.chunk_rows - 1) / p.chunk_rows;
  return p;
}

// Blocks for `owners` row owners.
unsigned owner_blocks(std::int64_t owners, std::int64_t cols) {
  return warp_owned(cols) ? blocks_for(owners, kWarpBlockThreads / 32) : blocks_for(owners, 1);
}

// Column loops run in int (c + blockDim must not overflow).
int checked_cols(std::int64_t cols, const char* kernel) {
  if (cols > INT_MAX / 2) throw_error(std::string("CUDA ") + kernel + ": rows of more than 2^30 columns");
  return static_cast<int>(cols);
}

// One row owner: a warp (kWarp) or the whole block. Owners stride over rows
// (or chunks) with index/count; their threads stride over columns with lane/size.
template <bool kWarp>
struct RowOwner {
  int lane;
  int size;
  std::int64_t index;
  std::int64_t count;

  __device__ RowOwner() {
    if constexpr (kWarp) {
      const int warps = static_cast<int>(blockDim.x >> 5);
      lane = static_cast<int>(threadIdx.x & 31);
      size = 32;
      index = static_cast<std::int64_t>(blockIdx.x) * warps + static_cast<int>(threadIdx.x >> 5);
      count = static_cast<std::int64_t>(gridDim.x) * warps;
    } else {
      lane = static_cast<int>(threadIdx.x);
      size = static_cast<int>(blockDim.x);
      index = blockIdx.x;
      count = gridDim.x;
    }
  }

  // Sum over the owner's threads, returned to all of them. Every thread of the
  // owner must call it (the loops over rows are uniform per owner). `red`: 32
  // values of shared memory, used by block owners.
  template <typename A>
  __device__ A sum(A v, A* red) const {
    if constexpr (kWarp) {
      return warp_sum(v);
    } else {
      return block_sum(v, red);
    }
  }
};

template <typename A>
__device__ __forceinline__ A sqrt_acc(A v) {
  if constexpr (std::is_same_v<A, double>) {
    return sqrt(v);
  } else {
    return sqrtf(v);
  }
}

// One rounding from f64, as the CPU's T(double).
template <typename T>
__device__ __forceinline__ T from_double(double v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __double2bfloat16(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __double2half(v);
  } else {
    return static_cast<T>(v);
  }
}

// --- forward ------------------------------------------------------------------

template <typename T, bool kWarp>
__global__ void __launch_bounds__(kRowBlockThreads)
    layer_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                              T* __restrict__ y, Acc<T>* __restrict__ mean, Acc<T>* __restrict__ rstd,
                              std::int64_t rows, int cols, Acc<T> eps) {
  using A = Acc<T>;
  __shared__ A red[32];
  const RowOwner<kWarp> o;
  const A inv_cols = A(1) / static_cast<A>(cols);
  for (std::int64_t r = o.index; r < rows; r += o.count) {
    const T* xr = x + r * cols;
    A s = 0;
    for (int c = o.lane; c < cols; c += o.size) s += load(xr + c);
    const A m0 = o.sum(s, red) * inv_cols;
    // Corrected two-pass (kernels/cpu/norm.cpp): Σ(x - m0) repairs m0's rounding in mean and variance.
    A sd = 0, sd2 = 0;
    for (int c = o.lane; c < cols; c += o.size) {
      const A d = load(xr + c) - m0;
      sd += d;
      sd2 += d * d;
    }
    sd = o.sum(sd, red);
    sd2 = o.sum(sd2, red);
    const A m = m0 + sd * inv_cols;
    const A v = (sd2 - sd * sd * inv_cols) * inv_cols;
    const A var = A(0) < v ? v : A(0);  // std::max(0, v), NaN included
    const A rs = A(1) / sqrt_acc(var + eps);
    T* yr = y + r * cols;
    for (int c = o.lane; c < cols; c += o.size) {
      store(yr + c, (load(xr + c) - m) * rs * load(w + c) + (b != nullptr ? load(b + c) : A(0)));
    }
    if (o.lane == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
  }
}

template <typename T, bool kWarp>
__global__ void __launch_bounds__(kRowBlockThreads)
    rms_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                            Acc<T>* __restrict__ rstd, std::int64_t rows, int cols, Acc<T> eps) {
  using A = Acc<T>;
  __shared__ A red[32];
  const RowOwner<kWarp> o;
  const A inv_cols = A(1) / static_cast<A>(cols);
  for (std::int64_t r = o.index; r < rows; r += o.count) {
    const T* xr = x + r * cols;
    A s = 0;
    for (int c = o.lane; c < cols; c += o.size) {
      const A v = load(xr + c);
      s += v * v;
    }
    const A rs = A(1) / sqrt_acc(o.sum(s, red) * inv_cols + eps);
    T* yr = y + r * cols;
    for (int c = o.lane; c < cols; c += o.size) store(yr + c, load(xr + c) * rs * load(w + c));
    if (o.lane == 0) rstd[r] = rs;
  }
}

// --- backward -----------------------------------------------------------------

// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w; pw[chunk, c] = Σ dy xhat and
// pb[chunk, c] = Σ dy over the chunk's rows in order (pb may be null).
template <typename T, bool kWarp>
__global__ void __launch_bounds__(kRowBlockThreads)
    layer_norm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                               const Acc<T>* __restrict__ mean, const Acc<T>* __restrict__ rstd, T* __restrict__ dx,
                               Acc<T>* __restrict__ pw, Acc<T>* __restrict__ pb, std::int64_t rows, int cols,
                               std::int64_t chunk_rows, std::int64_t chunks) {
  using A = Acc<T>;
  __shared__ A red[32];
  const RowOwner<kWarp> o;
  const A inv_cols = A(1) / static_cast<A>(cols);
  for (std::int64_t chunk = o.index; chunk < chunks; chunk += o.count) {
    A* pwc = pw + chunk * cols;
    A* pbc = pb != nullptr ? pb + chunk * cols : nullptr;
    const std::int64_t r0 = chunk * chunk_rows;
    const std::int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      const T* dyr = dy + r * cols;
      const A m = mean[r], rs = rstd[r];
      A sg = 0, sgx = 0;
      for (int c = o.lane; c < cols; c += o.size) {
        const A g = load(dyr + c) * load(w + c);
        sg += g;
        sgx += g * ((load(xr + c) - m) * rs);
      }
      const A mg = o.sum(sg, red) * inv_cols;
      const A mgx = o.sum(sgx, red) * inv_cols;
      T* dxr = dx + r * cols;
      const bool first = r == r0;
      for (int c = o.lane; c < cols; c += o.size) {
        const A d = load(dyr + c);
        const A xh = (load(xr + c) - m) * rs;
        store(dxr + c, rs * (d * load(w + c) - mg - xh * mgx));
        pwc[c] = first ? d * xh : pwc[c] + d * xh;
        if (pbc != nullptr) pbc[c] = first ? d : pbc[c] + d;
      }
    }
  }
}

// dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd; pw[chunk, c] = Σ dy xhat.
template <typename T, bool kWarp>
__global__ void __launch_bounds__(kRowBlockThreads)
    rms_norm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                             const Acc<T>* __restrict__ rstd, T* __restrict__ dx, Acc<T>* __restrict__ pw,
                             std::int64_t rows, int cols, std::int64_t chunk_rows, std::int64_t chunks) {
  using A = Acc<T>;
  __shared__ A red[32];
  const RowOwner<kWarp> o;
  const A inv_cols = A(1) / static_cast<A>(cols);
  for (std::int64_t chunk = o.index; chunk < chunks; chunk += o.count) {
    A* pwc = pw + chunk * cols;
    const std::int64_t r0 = chunk * chunk_rows;
    const std::int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      const T* dyr = dy + r * cols;
      const A rs = rstd[r];
      A sgx = 0;
      for (int c = o.lane; c < cols; c += o.size) sgx += load(dyr + c) * load(w + c) * (load(xr + c) * rs);
      const A mgx = o.sum(sgx, red) * inv_cols;
      T* dxr = dx + r * cols;
      const bool first = r == r0;
      for (int c = o.lane; c < cols; c += o.size) {
        const A d = load(dyr + c);
        const A xh = load(xr + c) * rs;
        store(dxr + c, rs * (d * load(w + c) - xh * mgx));
        pwc[c] = first ? d * xh : pwc[c] + d * xh;
      }
    }
  }
}

// out[c] = Σ_k partial[k, c] over the chunks k, in f64 and a fixed order (thread
// row ty sums k ≡ ty mod kCombineGroups ascending, then the groups are added in
// order), rounded once to T. blockDim = (32, kCombineGroups); grid.x covers the columns.
template <typename T>
__global__ void __launch_bounds__(32 * kCombineGroups)
    combine_partials_kernel(const Acc<T>* __restrict__ partial, std::int64_t chunks, int cols, T* __restrict__ out) {
  __shared__ double sums[kCombineGroups][32];
  const int c = static_cast<int>(blockIdx.x) * 32 + static_cast<int>(threadIdx.x);
  double s = 0;
  if (c < cols) {
    for (std::int64_t k = threadIdx.y; k < chunks; k += kCombineGroups) s += static_cast<double>(partial[k * cols + c]);
  }
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double total = 0;
    for (int g = 0; g < kCombineGroups; ++g) total += sums[g][threadIdx.x];
    out[c] = from_double<T>(total);
  }
}

template <typename T>
void combine_partials(const Acc<T>* partial, std::int64_t chunks, int cols, T* out, const char* kernel) {
  const unsigned blocks = static_cast<unsigned>((static_cast<std::int64_t>(cols) + 31) / 32);
  combine_partials_kernel<T><<<blocks, dim3(32, kCombineGroups), 0, stream()>>>(partial, chunks, cols, out);
  check_launch(kernel);
}

template <typename T>
void zero_fill(T* p, std::int64_t n, const char* kernel) {
  if (p == nullptr || n <= 0) return;
  check_cuda(cudaMemsetAsync(p, 0, static_cast<std::size_t>(n) * sizeof(T), stream()), kernel);
}

}  // namespace

void layer_norm_forward(DType dtype, const void* x, const void* weight, const void* bias, void* y, void* mean,
                        void* rstd, std::int64_t rows, std::int64_t cols, double eps) {
  constexpr const char* kernel = "layer_norm";
  if (rows <= 0) return;
  const int c = checked_cols(cols, kernel);
  dispatch_floating(dtype, kernel, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const auto* xp = static_cast<const T*>(x);
    const auto* wp = static_cast<const T*>(weight);
    const auto* bp = static_cast<const T*>(bias);
    auto* yp = static_cast<T*>(y);
    auto* mp = static_cast<A*>(mean);
    auto* rp = static_cast<A*>(rstd);
    const unsigned blocks = owner_blocks(rows, cols);
    if (warp_owned(cols)) {
      layer_norm_forward_kernel<T, true><<<blocks, kWarpBlockThreads, 0, stream()>>>(xp, wp, bp, yp, mp, rp, rows, c,
                                                                                    static_cast<A>(eps));
    } else {
      layer_norm_forward_kernel<T, false><<<blocks, kRowBlockThreads, 0, stream()>>>(xp, wp, bp, yp, mp, rp, rows, c,
                                                                                     static_cast<A>(eps));
    }
    check_launch(kernel);
  });
}

void rms_norm_forward(DType dtype, const void* x, const void* weight, void* y, void* rstd, std::int64_t rows,
                      std::int64_t cols, double eps) {
  constexpr const char* kernel = "rms_norm";
  if (rows <= 0) return;
  const int c = checked_cols(cols, kernel);
  dispatch_floating(dtype, kernel, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const auto* xp = static_cast<const T*>(x);
    const auto* wp = static_cast<const T*>(weight);
    auto* yp = static_cast<T*>(y);
    auto* rp = static_cast<A*>(rstd);
    const unsigned blocks = owner_blocks(rows, cols);
    if (warp_owned(cols)) {
      rms_norm_forward_kernel<T, true><<<blocks, kWarpBlockThreads, 0, stream()>>>(xp, wp, yp, rp, rows, c,
                                                                                  static_cast<A>(eps));
    } else {
      rms_norm_forward_kernel<T, false><<<blocks, kRowBlockThreads, 0, stream()>>>(xp, wp, yp, rp, rows, c,
                                                                                   static_cast<A>(eps));
    }
    check_launch(kernel);
  });
}

namespace detail {

std::size_t norm_backward_scratch_bytes(DType dtype, std::int64_t rows, std::int64_t cols, int arrays) {
  const ChunkPlan plan = chunk_plan(rows, cols);
  const std::size_t acc_size = dtype == DType::f64 ? sizeof(double) : sizeof(float);
  return static_cast<std::size_t>(plan.chunks) * static_cast<std::size_t>(cols) * acc_size *
         static_cast<std::size_t>(arrays);
}

void launch_layer_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* mean,
                                const void* rstd, void* dx, void* dweight, void* dbias, std::int64_t rows,
                                std::int64_t cols, void* scratch) {
  constexpr const char* kernel = "layer_norm_backward";
  const int c = checked_cols(cols, kernel);
  dispatch_floating(dtype, kernel, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    auto* dw = static_cast<T*>(dweight);
    auto* db = static_cast<T*>(dbias);
    const ChunkPlan plan = chunk_plan(rows, cols);
    if (plan.chunks == 0) {  // no rows: the sums over rows are zero
      zero_fill(dw, cols, kernel);
      zero_fill(db, cols, kernel);
      return;
    }
    auto* pw = static_cast<A*>(scratch);
    A* pb = db != nullptr ? pw + plan.chunks * cols : nullptr;
    const auto* dyp = static_cast<const T*>(dy);
    const auto* xp = static_cast<const T*>(x);
    const auto* wp = static_cast<const T*>(weight);
    const auto* mp = static_cast<const A*>(mean);
    const auto* rp = static_cast<const A*>(rstd);
    auto* dxp = static_cast<T*>(dx);
    const unsigned blocks = owner_blocks(plan.chunks, cols);
    if (warp_owned(cols)) {
      layer_norm_backward_kernel<T, true><<<blocks, kWarpBlockThreads, 0, stream()>>>(
          dyp, xp, wp, mp, rp, dxp, pw, pb, rows, c, plan.chunk_rows, plan.chunks);
    } else {
      layer_norm_backward_kernel<T, false><<<blocks, kRowBlockThreads, 0, stream()>>>(
          dyp, xp, wp, mp, rp, dxp, pw, pb, rows, c, plan.chunk_rows, plan.chunks);
    }
    check_launch(kernel);
    combine_partials<T>(pw, plan.chunks, c, dw, kernel);
    if (db != nullptr) combine_partials<T>(pb, plan.chunks, c, db, kernel);
  });
}

void launch_rms_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* rstd,
                              void* dx, void* dweight, std::int64_t rows, std::int64_t cols, void* scratch) {
  constexpr const char* kernel = "rms_norm_backward";
  const int c = checked_cols(cols, kernel);
  dispatch_floating(dtype, kernel, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    auto* dw = static_cast<T*>(dweight);
    const ChunkPlan plan = chunk_plan(rows, cols);
    if (plan.chunks == 0) {
      zero_fill(dw, cols, kernel);
      return;
    }
    auto* pw = static_cast<A*>(scratch);
    const unsigned blocks = owner_blocks(plan.chunks, cols);
    if (warp_owned(cols)) {
      rms_norm_backward_kernel<T, true><<<blocks, kWarpBlockThreads, 0, stream()>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(weight),
          static_cast<const A*>(rstd), static_cast<T*>(dx), pw, rows, c, plan.chunk_rows, plan.chunks);
    } else {
      rms_norm_backward_kernel<T, false><<<blocks, kRowBlockThreads, 0, stream()>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(weight),
          static_cast<const A*>(rstd), static_cast<T*>(dx), pw, rows, c, plan.chunk_rows, plan.chunks);
    }
    check_launch(kernel);
    combine_partials<T>(pw, plan.chunks, c, dw, kernel);
  });
}

}  // namespace detail

}  // namespace trident::kernels::cuda
