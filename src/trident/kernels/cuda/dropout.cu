// Dropout with the counter-based generator, bit for bit the CPU kernel's mask
// (kernels/cpu/dropout.cpp): element at global index g uses 32-bit word g % 4
// of Philox-4x32-10 block g / 4 under CounterRng's counter and key layout.
//
// Launch shape: one thread per (local row, aligned quad of global indices) —
// a quad is one Philox block, so each thread runs the generator once for up to
// four consecutive elements of its row; flat grid-stride over rows × quads
// (256 threads per block). Each element is read and written by its own thread,
// so y may alias x.
#include "trident/kernels/cuda/dropout_launch.h"

#include "trident/kernels/cuda/common.cuh"
#include "trident/kernels/cuda/philox.cuh"

namespace trident::kernels::cuda::detail {

namespace {

constexpr int kDropoutThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kDropoutThreads) dropout_kernel(const T* x, T* y, DropoutPlan p) {
  using A = Acc<T>;
  const std::int64_t quads = (p.row + 6) / 4;  // covers a row starting anywhere within a quad
  const std::int64_t total = p.rows * quads;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kDropoutThreads;
  const A scale = static_cast<A>(p.scale);
  for (std::int64_t u = static_cast<std::int64_t>(blockIdx.x) * kDropoutThreads + threadIdx.x; u < total; u += stride) {
    const std::int64_t r = u / quads, q = u - r * quads;
    std::int64_t rem = r, g0 = p.base;
    for (int k = p.rank - 2; k >= 0; --k) {  // dims[rank - 1] is the row itself
      const std::int64_t d = rem / p.dims[k];
      g0 += (rem - d * p.dims[k]) * p.global_strides[k];
      rem = d;
    }
    const std::int64_t block = (g0 >> 2) + q;
    const std::int64_t j0 = block * 4 - g0;  // local column of the quad's first word (may be < 0)
    if (j0 >= p.row) continue;
    const T* xr = x + r * p.row;
    T* yr = y + r * p.row;
    if (p.drop_all) {
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const std::int64_t j = j0 + w;
        if (j >= 0 && j < p.row) store(yr + j, A(0));
      }
      continue;
    }
    const uint4 bits = philox_block(static_cast<std::uint64_t>(block), p.stream, p.seed);
    const std::uint32_t word[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const std::int64_t j = j0 + w;
      // x * 0 for dropped elements, as the CPU kernel (inf and NaN give NaN).
      if (j >= 0 && j < p.row) store(yr + j, load(xr + j) * (word[w] >= p.threshold ? scale : A(0)));
    }
  }
}

}  // namespace

void launch_dropout(DType dtype, const void* x, void* y, const DropoutPlan& plan) {
  if (plan.rows <= 0 || plan.row <= 0) return;
  const std::int64_t total = plan.rows * ((plan.row + 6) / 4);
  dispatch_floating(dtype, "dropout", [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T><<<blocks_for(total, kDropoutThreads), kDropoutThreads, 0, stream()>>>(static_cast<const T*>(x),
                                                                                            static_cast<T*>(y), plan);
    check_launch("dropout");
  });
}

}  // namespace trident::kernels::cuda::detail
