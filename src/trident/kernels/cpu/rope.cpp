// RoPE: a [T, D/2] cos/sin table built once per call (f64 angles, so large
// positions keep their precision), then an elementwise rotation over
// [B·T] rows of H·D elements, split across threads by rows.
#include "trident/kernels/cpu/rope.h"

#include <cmath>
#include <vector>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"

namespace trident::kernels::cpu {

namespace {

template <typename T>
void rope_impl(const T* x, T* out, const std::int64_t* positions, std::int64_t B, std::int64_t seq, std::int64_t H,
               std::int64_t D, const RopeFrequencies& freq, bool inverse) {
  using A = acc_t<T>;
  const std::int64_t half = D / 2;
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) inv_freq[static_cast<std::size_t>(i)] = freq.inv_freq(i, D);
  std::vector<A> cos_table(static_cast<std::size_t>(seq * half)), sin_table(static_cast<std::size_t>(seq * half));
  const double sign = inverse ? -1.0 : 1.0;
  parallel_for(0, seq, std::max<std::int64_t>(1, 2048 / std::max<std::int64_t>(half, 1)),
               [&](std::int64_t lo, std::int64_t hi) {
                 for (std::int64_t t = lo; t < hi; ++t) {
                   const double pos = static_cast<double>(positions[t]);
                   for (std::int64_t i = 0; i < half; ++i) {
                     const double angle = pos * inv_freq[static_cast<std::size_t>(i)];
                     cos_table[static_cast<std::size_t>(t * half + i)] = static_cast<A>(std::cos(angle));
                     sin_table[static_cast<std::size_t>(t * half + i)] = static_cast<A>(sign * std::sin(angle));
                   }
                 }
               });
  const std::int64_t row = H * D;
  parallel_for(0, B * seq, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(row, 1)),
               [&](std::int64_t lo, std::int64_t hi) {
                 for (std::int64_t bt = lo; bt < hi; ++bt) {
                   const std::int64_t t = bt % seq;
                   const A* c = cos_table.data() + t * half;
                   const A* s = sin_table.data() + t * half;
                   for (std::int64_t h = 0; h < H; ++h) {
                     const T* xr = x + bt * row + h * D;
                     T* orow = out + bt * row + h * D;
                     for (std::int64_t i = 0; i < half; ++i) {
                       const A x1 = load(xr[i]), x2 = load(xr[i + half]);
                       orow[i] = store<T>(x1 * c[i] - x2 * s[i]);
                       orow[i + half] = store<T>(x2 * c[i] + x1 * s[i]);
                     }
                   }
                 }
               });
}

}  // namespace

void rope(DType dtype, const void* x, void* out, const std::int64_t* positions, std::int64_t batch, std::int64_t seq,
          std::int64_t heads, std::int64_t head_dim, const RopeFrequencies& freq, bool inverse) {
  TRIDENT_DISPATCH_FLOAT(dtype, "rope", [&] {
    rope_impl(static_cast<const scalar_t*>(x), static_cast<scalar_t*>(out), positions, batch, seq, heads, head_dim,
              freq, inverse);
  });
}

}  // namespace trident::kernels::cpu
