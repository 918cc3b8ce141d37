// Launchers of shape.cu for shape.cpp (internal; C++17 and fmt-free). shape.cpp
// turns permute and copy_dim_block into one of two plans, in elements:
//  - RowCopy: rows of row_len contiguous elements; row r (row-major over dims)
//    starts at src_base + sum_k coord_k * src_strides[k] in the source and at
//    dst_base + r * dst_pitch in the destination;
//  - Transpose: the output viewed as batch × [m, n] tiles whose n axis is
//    contiguous in the output and whose m axis is contiguous in the input.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trident::kernels::cuda::detail {

inline constexpr int kMaxPlanDims = 16;

struct RowCopyPlan {
  std::int64_t rows = 0;
  std::int64_t row_len = 0;
  int rank = 0;  // of dims/src_strides (0: one row)
  std::int64_t dims[kMaxPlanDims] = {};
  std::int64_t src_strides[kMaxPlanDims] = {};
  std::int64_t src_base = 0;
  std::int64_t dst_base = 0;
  std::int64_t dst_pitch = 0;
};

struct TransposePlan {
  std::int64_t m = 0;           // tile rows: contiguous in the input
  std::int64_t n = 0;           // tile columns: contiguous in the output
  std::int64_t in_stride_n = 0;  // input stride of the n axis
  std::int64_t out_stride_m = 0; // output stride of the m axis
  int batch_rank = 0;
  std::int64_t batch_count = 1;
  std::int64_t batch_dims[kMaxPlanDims] = {};
  std::int64_t batch_in_strides[kMaxPlanDims] = {};
  std::int64_t batch_out_strides[kMaxPlanDims] = {};
};

// Both copy elements of elem_size bytes (1, 2, 4 or 8) from src to dst (device memory, no overlap).
void launch_row_copy(std::size_t elem_size, const void* src, void* dst, const RowCopyPlan& plan);
void launch_transpose(std::size_t elem_size, const void* src, void* dst, const TransposePlan& plan);

}  // namespace trident::kernels::cuda::detail
