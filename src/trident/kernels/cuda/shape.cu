// Data movement for permute, split, concat and slice (plans from shape.cpp,
// shape_launch.h). Byte-generic: values are moved as unsigned words.
//
// Row copy: one thread per unit of U bytes, flat grid-stride over rows × units
// per row, U the largest of 16, 8, 4, 2, 1 that divides every row length,
// offset and pitch in bytes and both pointers. Index arithmetic is 32-bit when
// every offset fits (integer division is far cheaper), 64-bit otherwise. Rows of
// at least kLongRow units (the padded copies of an odd vocabulary's logits,
// 50257 columns) take a block per row instead, which finds the row's offset
// once rather than dividing per unit.
// Transpose: 32 × 32 tiles through shared memory (padded against bank
// conflicts), (32, 8) threads, grid-stride over batch × tiles; loads run along
// the input's contiguous axis and stores along the output's, so both coalesce.
#include "trident/kernels/cuda/shape_launch.h"

#include <algorithm>
#include <string>

#include "trident/kernels/cuda/common.cuh"

namespace trident::kernels::cuda::detail {

namespace {

constexpr int kCopyThreads = 256;
constexpr int kTile = 32, kTileRows = 8;
constexpr unsigned kMaxGrid = 65535u * 8u;
constexpr std::int64_t kLongRow = 256;

template <int kBytes>
struct Word;
template <> struct Word<1> { using type = std::uint8_t; };
template <> struct Word<2> { using type = std::uint16_t; };
template <> struct Word<4> { using type = std::uint32_t; };
template <> struct Word<8> { using type = std::uint64_t; };
template <> struct Word<16> { using type = uint4; };

// The plan in units of the copy (I: index type).
template <typename I>
struct UnitPlan {
  I rows, row_len;
  int rank;
  I dims[kMaxPlanDims];
  I src_strides[kMaxPlanDims];
  I src_base, dst_base, dst_pitch;
};

template <typename U, typename I>
__global__ void __launch_bounds__(kCopyThreads) row_copy_kernel(const U* src, U* dst, UnitPlan<I> p) {
  const I total = p.rows * p.row_len;
  const I stride = static_cast<I>(gridDim.x) * kCopyThreads;
  for (I u = static_cast<I>(blockIdx.x) * kCopyThreads + threadIdx.x; u < total; u += stride) {
    const I row = u / p.row_len, col = u - row * p.row_len;
    I rem = row, off = p.src_base;
    for (int k = p.rank - 1; k >= 0; --k) {
      const I q = rem / p.dims[k];
      off += (rem - q * p.dims[k]) * p.src_strides[k];
      rem = q;
    }
    dst[p.dst_base + row * p.dst_pitch + col] = src[off + col];
  }
}

template <typename U, typename I>
__global__ void __launch_bounds__(kCopyThreads) row_copy_long_kernel(const U* __restrict__ src, U* __restrict__ dst,
                                                                    UnitPlan<I> p) {
  for (I row = blockIdx.x; row < p.rows; row += gridDim.x) {
    I rem = row, off = p.src_base;
    for (int k = p.rank - 1; k >= 0; --k) {
      const I q = rem / p.dims[k];
      off += (rem - q * p.dims[k]) * p.src_strides[k];
      rem = q;
    }
    const U* __restrict__ from = src + off;
    U* __restrict__ to = dst + p.dst_base + row * p.dst_pitch;
#pragma unroll 4
    for (I c = threadIdx.x; c < p.row_len; c += kCopyThreads) to[c] = from[c];
  }
}

template <typename U, typename I>
void row_copy_as(const void* src, void* dst, const RowCopyPlan& plan, std::int64_t scale) {
  UnitPlan<I> p{};
  p.rows = static_cast<I>(plan.rows);
  p.row_len = static_cast<I>(plan.row_len * scale);
  p.rank = plan.rank;
  for (int k = 0; k < plan.rank; ++k) {
    p.dims[k] = static_cast<I>(plan.dims[k]);
    p.src_strides[k] = static_cast<I>(plan.src_strides[k] * scale);
  }
  p.src_base = static_cast<I>(plan.src_base * scale);
  p.dst_base = static_cast<I>(plan.dst_base * scale);
  p.dst_pitch = static_cast<I>(plan.dst_pitch * scale);
  const std::int64_t total = plan.rows * plan.row_len * scale;
  if (p.row_len >= kLongRow) {
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(plan.rows, kMaxGrid));
    row_copy_long_kernel<U, I><<<blocks, kCopyThreads, 0, stream()>>>(static_cast<const U*>(src), static_cast<U*>(dst), p);
    check_launch("row copy (permute/split/concat/slice/pad)");
    return;
  }
  row_copy_kernel<U, I><<<blocks_for(total, kCopyThreads), kCopyThreads, 0, stream()>>>(static_cast<const U*>(src),
                                                                                         static_cast<U*>(dst), p);
  check_launch("row copy (permute/split/concat/slice)");
}

template <int kBytes>
void row_copy_units(const void* src, void* dst, const RowCopyPlan& plan, std::int64_t scale, bool narrow) {
  using U = typename Word<kBytes>::type;
  if (narrow) {
    row_copy_as<U, std::uint32_t>(src, dst, plan, scale);
  } else {
    row_copy_as<U, std::int64_t>(src, dst, plan, scale);
  }
}

bool divides(std::int64_t unit, std::int64_t bytes) { return bytes % unit == 0; }

template <typename E>
__global__ void __launch_bounds__(kTile* kTileRows) transpose_kernel(const E* src, E* dst, TransposePlan p) {
  __shared__ E tile[kTile][kTile + 1];
  const std::int64_t tiles_m = (p.m + kTile - 1) / kTile, tiles_n = (p.n + kTile - 1) / kTile;
  const std::int64_t tiles = p.batch_count * tiles_m * tiles_n;
  // The tile loop depends on blockIdx only: every thread reaches both barriers.
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const std::int64_t tn = t % tiles_n, tm = (t / tiles_n) % tiles_m;
    std::int64_t b = t / (tiles_n * tiles_m), in_off = 0, out_off = 0;
    for (int k = p.batch_rank - 1; k >= 0; --k) {
      const std::int64_t q = b / p.batch_dims[k], coord = b - q * p.batch_dims[k];
      in_off += coord * p.batch_in_strides[k];
      out_off += coord * p.batch_out_strides[k];
      b = q;
    }
    const std::int64_t m0 = tm * kTile, n0 = tn * kTile;
    // Load: lanes along m (contiguous in src).
    const std::int64_t m = m0 + threadIdx.x;
#pragma unroll
    for (int k = 0; k < kTile; k += kTileRows) {
      const std::int64_t n = n0 + threadIdx.y + k;
      if (m < p.m && n < p.n) tile[threadIdx.y + k][threadIdx.x] = src[in_off + m + n * p.in_stride_n];
    }
    __syncthreads();
    // Store: lanes along n (contiguous in dst).
    const std::int64_t n = n0 + threadIdx.x;
#pragma unroll
    for (int k = 0; k < kTile; k += kTileRows) {
      const std::int64_t mm = m0 + threadIdx.y + k;
      if (mm < p.m && n < p.n) dst[out_off + mm * p.out_stride_m + n] = tile[threadIdx.x][threadIdx.y + k];
    }
    __syncthreads();
  }
}

template <int kBytes>
void transpose_as(const void* src, void* dst, const TransposePlan& plan) {
  using E = typename Word<kBytes>::type;
  const std::int64_t tiles = plan.batch_count * ((plan.m + kTile - 1) / kTile) * ((plan.n + kTile - 1) / kTile);
  const unsigned blocks = static_cast<unsigned>(tiles < kMaxGrid ? tiles : kMaxGrid);
  transpose_kernel<E><<<blocks, dim3(kTile, kTileRows), 0, stream()>>>(static_cast<const E*>(src), static_cast<E*>(dst),
                                                                       plan);
  check_launch("permute (transpose)");
}

}  // namespace

void launch_row_copy(std::size_t elem_size, const void* src, void* dst, const RowCopyPlan& plan) {
  if (plan.rows <= 0 || plan.row_len <= 0) return;
  const auto es = static_cast<std::int64_t>(elem_size);
  // The widest unit that divides every byte quantity and both addresses.
  int unit = 16;
  for (; unit > 1; unit /= 2) {
    bool ok = (unit % es == 0 || es % unit == 0) && divides(unit, plan.row_len * es) && divides(unit, plan.src_base * es) &&
              divides(unit, plan.dst_base * es) && divides(unit, plan.dst_pitch * es) &&
              reinterpret_cast<std::uintptr_t>(src) % static_cast<unsigned>(unit) == 0 &&
              reinterpret_cast<std::uintptr_t>(dst) % static_cast<unsigned>(unit) == 0;
    for (int k = 0; ok && k < plan.rank; ++k) ok = divides(unit, plan.src_strides[k] * es);
    if (ok) break;
  }
  // Element counts become unit counts: divide by unit / es when a unit holds whole elements,
  // else multiply by es / unit (units per element).
  RowCopyPlan p = plan;
  std::int64_t scale = 1;
  if (unit >= es) {
    const std::int64_t per = unit / es;  // elements per unit; unit divides every byte quantity
    p.row_len /= per;
    p.src_base /= per;
    p.dst_base /= per;
    p.dst_pitch /= per;
    for (int k = 0; k < p.rank; ++k) p.src_strides[k] /= per;
  } else {
    scale = es / unit;
  }
  // Largest unit offset touched on either side, to choose 32-bit indexing.
  std::int64_t src_end = p.src_base + p.row_len, dst_end = p.dst_base + (p.rows - 1) * p.dst_pitch + p.row_len;
  for (int k = 0; k < p.rank; ++k) src_end += (p.dims[k] - 1) * p.src_strides[k];
  src_end *= scale;
  dst_end *= scale;
  const std::int64_t total = p.rows * p.row_len * scale;
  const bool narrow = src_end < (std::int64_t{1} << 31) && dst_end < (std::int64_t{1} << 31) &&
                      total < (std::int64_t{1} << 31);
  switch (unit) {
    case 16: row_copy_units<16>(src, dst, p, scale, narrow); break;
    case 8: row_copy_units<8>(src, dst, p, scale, narrow); break;
    case 4: row_copy_units<4>(src, dst, p, scale, narrow); break;
    case 2: row_copy_units<2>(src, dst, p, scale, narrow); break;
    default: row_copy_units<1>(src, dst, p, scale, narrow); break;
  }
}

void launch_transpose(std::size_t elem_size, const void* src, void* dst, const TransposePlan& plan) {
  if (plan.m <= 0 || plan.n <= 0 || plan.batch_count <= 0) return;
  switch (elem_size) {
    case 1: transpose_as<1>(src, dst, plan); break;
    case 2: transpose_as<2>(src, dst, plan); break;
    case 4: transpose_as<4>(src, dst, plan); break;
    case 8: transpose_as<8>(src, dst, plan); break;
    case 16: transpose_as<16>(src, dst, plan); break;
    default: throw_error("CUDA permute: element size " + std::to_string(elem_size) + " bytes is not 1, 2, 4, 8 or 16");
  }
}

}  // namespace trident::kernels::cuda::detail
