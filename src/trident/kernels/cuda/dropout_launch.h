// Launcher of dropout.cu for dropout.cpp (internal; C++17 and fmt-free).
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cuda::detail {

inline constexpr int kMaxDropoutDims = 16;

// The local tensor as rows of `row` elements whose global indices are consecutive: local row r
// (row-major over dims[0, rank)) starts at global index base + sum_k coord_k * global_strides[k].
struct DropoutPlan {
  int rank = 0;
  std::int64_t dims[kMaxDropoutDims] = {};
  std::int64_t global_strides[kMaxDropoutDims] = {};
  std::int64_t base = 0;
  std::int64_t rows = 0;
  std::int64_t row = 0;
  std::uint64_t seed = 0;    // CounterRng::seed()
  std::uint64_t stream = 0;  // CounterRng::stream()
  std::uint32_t threshold = 0;  // dropped iff the element's 32-bit word < threshold
  bool drop_all = false;        // p within 2^-33 of 1: every element becomes 0
  double scale = 1;             // 1 / (1 - p), applied in Acc<T>
};

// y may alias x.
void launch_dropout(DType dtype, const void* x, void* y, const DropoutPlan& plan);

}  // namespace trident::kernels::cuda::detail
