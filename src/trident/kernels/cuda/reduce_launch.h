// Launchers of reduce.cu for reduce.cpp (internal; C++17 and fmt-free). The
// host wrapper owns the f64 scratch (through the caching allocator) and
// reads the result back; these only queue kernels on the compute stream.
#pragma once

#include <cstdint>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cuda::detail {

// sum_all, pass 1: one f64 partial per chunk of kSumChunk elements, in index order.
inline constexpr std::int64_t kSumChunk = 8192;
inline std::int64_t sum_all_partials(std::int64_t n) { return (n + kSumChunk - 1) / kSumChunk; }
// Sums x[0, n) (n > 0) into *result (device memory): partials[sum_all_partials(n)] is scratch.
void launch_sum_all(DType dtype, const void* x, std::int64_t n, double* partials, double* result);

// sum_rows: rows are summed in groups of sum_rows_group(rows) rows (at most 65535 groups,
// the grid's y limit); with more than one group the group sums go to partials[groups * cols].
inline std::int64_t sum_rows_group(std::int64_t rows) {
  constexpr std::int64_t kMinGroup = 256, kMaxGroups = 65535;
  const std::int64_t spread = (rows + kMaxGroups - 1) / kMaxGroups;
  return spread > kMinGroup ? spread : kMinGroup;
}
inline std::int64_t sum_rows_groups(std::int64_t rows) {
  const std::int64_t g = sum_rows_group(rows);
  return rows <= g ? 1 : (rows + g - 1) / g;
}
// out[c] = sum_r x[r, c] (cols > 0, rows >= 0); partials may be null when sum_rows_groups(rows) == 1.
void launch_sum_rows(DType dtype, const void* x, void* out, std::int64_t rows, std::int64_t cols, double* partials);

}  // namespace trident::kernels::cuda::detail
