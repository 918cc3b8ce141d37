// Reductions: blocked f64 accumulation with a thread-count-independent combine
// order (blocks of 4096 elements / 64 rows, summed left to right).
#include "trident/kernels/cpu/reduce.h"

#include <vector>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"

namespace trident::kernels::cpu {

double sum_all(DType dtype, const void* x, std::int64_t n) {
  constexpr std::int64_t kBlock = 4096;
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks), 0.0);
  TRIDENT_DISPATCH_FLOAT(dtype, "sum", [&] {
    const auto* p = static_cast<const scalar_t*>(x);
    parallel_for(0, blocks, 4, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t b = lo; b < hi; ++b) {
        double s = 0;
        const std::int64_t end = std::min(n, (b + 1) * kBlock);
        for (std::int64_t i = b * kBlock; i < end; ++i) s += static_cast<double>(load(p[i]));
        partial[static_cast<std::size_t>(b)] = s;
      }
    });
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void sum_rows(DType dtype, const void* x, void* out, std::int64_t rows, std::int64_t cols) {
  TRIDENT_DISPATCH_FLOAT(dtype, "sum_rows", [&] {
    const auto* p = static_cast<const scalar_t*>(x);
    auto* o = static_cast<scalar_t*>(out);
    // Parallel over column blocks; each column summed over rows in order (deterministic).
    constexpr std::int64_t kCols = 256;
    const std::int64_t col_blocks = (cols + kCols - 1) / kCols;
    parallel_for(0, col_blocks, 1, [&](std::int64_t lo, std::int64_t hi) {
      std::vector<double> acc(static_cast<std::size_t>(kCols));
      for (std::int64_t cb = lo; cb < hi; ++cb) {
        const std::int64_t c0 = cb * kCols, c1 = std::min(cols, c0 + kCols);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t r = 0; r < rows; ++r) {
          const scalar_t* row = p + r * cols;
          for (std::int64_t c = c0; c < c1; ++c) acc[static_cast<std::size_t>(c - c0)] += static_cast<double>(load(row[c]));
        }
        for (std::int64_t c = c0; c < c1; ++c) o[c] = store<scalar_t>(static_cast<acc_t<scalar_t>>(acc[static_cast<std::size_t>(c - c0)]));
      }
    });
  });
}

}  // namespace trident::kernels::cpu
