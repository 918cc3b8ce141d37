// RoPE rotation, as the CPU kernel (kernels/cpu/rope.cpp): the angle
// position * freq.inv_freq(i, D) (kernels/rope_frequencies.h) and its cos/sin in f64, rounded to Acc<T>, then
// out[i] = x[i] cos - x[i + D/2] sin and out[i + D/2] = x[i + D/2] cos + x[i] sin.
//
// Launch shape: blocks of (bx, by) threads, bx = D/2 rounded up to a warp
// (at most 128) and by = 256 / bx; thread (tx, ty) takes row
// blockIdx.x * by + ty of the B*T rows (grid-stride) and pair indices
// i = tx, tx + bx, ...; it computes the cos/sin of (row, i) once and rotates
// pair i of every head of the row (consecutive lanes touch consecutive
// elements of a head). Each pair is read and written by one thread, so out
// may alias x.
#include "trident/kernels/cuda/common.cuh"
#include "trident/kernels/cuda/rope_launch.h"

namespace trident::kernels::cuda::detail {

namespace {

constexpr int kRopeThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(const T* x, T* out, const std::int64_t* positions, std::int64_t position_offset, std::int64_t rows,
                std::int64_t seq, std::int64_t heads, std::int64_t head_dim, RopeFrequencies freq, double sign) {
  using A = Acc<T>;
  const std::int64_t half = head_dim / 2;
  const std::int64_t row_stride = heads * head_dim;
  for (std::int64_t bt = static_cast<std::int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; bt < rows;
       bt += static_cast<std::int64_t>(gridDim.x) * blockDim.y) {
    const std::int64_t t = bt % seq;
    const double pos = static_cast<double>(positions != nullptr ? positions[t] : position_offset + t);
    for (std::int64_t i = threadIdx.x; i < half; i += blockDim.x) {
      const double inv_freq = freq.inv_freq(i, head_dim);
      double s, c;
      sincos(pos * inv_freq, &s, &c);
      const A cs = static_cast<A>(c), sn = static_cast<A>(sign * s);
      const T* xr = x + bt * row_stride + i;
      T* orow = out + bt * row_stride + i;
      for (std::int64_t h = 0; h < heads; ++h) {
        const A x1 = load(xr + h * head_dim), x2 = load(xr + h * head_dim + half);
        store(orow + h * head_dim, x1 * cs - x2 * sn);
        store(orow + h * head_dim + half, x2 * cs + x1 * sn);
      }
    }
  }
}

}  // namespace

void launch_rope(DType dtype, const void* x, void* out, const std::int64_t* positions, std::int64_t position_offset,
                 std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
                 const RopeFrequencies& freq, bool inverse) {
  const std::int64_t rows = batch * seq, half = head_dim / 2;
  if (rows <= 0 || heads <= 0 || half <= 0) return;
  const int bx = half >= 128 ? 128 : static_cast<int>((half + 31) / 32 * 32);
  const int by = kRopeThreads / bx;
  const dim3 block(static_cast<unsigned>(bx), static_cast<unsigned>(by));
  const unsigned blocks = blocks_for(rows, by);
  dispatch_floating(dtype, "rope", [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<blocks, block, 0, stream()>>>(static_cast<const T*>(x), static_cast<T*>(out), positions,
                                                   position_offset, rows, seq, heads, head_dim, freq,
                                                   inverse ? -1.0 : 1.0);
    check_launch("rope");
  });
}

}  // namespace trident::kernels::cuda::detail
