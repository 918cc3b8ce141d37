// The CPU kernels' one exp (kernels/cpu/exp.h) against its stated numerics:
// relative error below 2e-7 over a sweep of the float bit patterns whose e^x
// is normal, +inf above ln(FLT_MAX), exactly 0 below -87.3, NaN through, and
// the 16-lane form equal to the scalar form lane for lane.
#include "trident/kernels/cpu/exp.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

namespace trident {
namespace {

using kernels::cpu::exp_f32;

// Every `stride`-th float bit pattern in [lo, hi] (both signs), plus the ends.
std::vector<float> sweep(float lo, float hi, std::uint32_t stride) {
  std::vector<float> xs{lo, hi, 0.0f, -0.0f};
  for (std::uint32_t b = 0; b <= std::bit_cast<std::uint32_t>(hi); b += stride) xs.push_back(std::bit_cast<float>(b));
  for (std::uint32_t b = 0x80000000u; b <= std::bit_cast<std::uint32_t>(lo); b += stride)
    xs.push_back(std::bit_cast<float>(b));
  return xs;
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();
// The largest float whose e^x is finite (the next one up, 88.72283936, is past ln(FLT_MAX)).
const float kLargestFinite = std::nextafter(88.7228391f, 0.0f);

TEST(Exp, RelativeErrorBelow2e7WhereTheResultIsNormal) {
  double worst = 0;
  float at = 0;
  for (float x : sweep(-87.3f, kLargestFinite, 97)) {
    const double ref = std::exp(static_cast<double>(x));
    const double err = std::fabs(exp_f32(x) - ref) / ref;
    if (err > worst) worst = err, at = x;
  }
  EXPECT_LT(worst, 2e-7) << "at x = " << at;
  std::printf("worst relative error %.3g at x = %.9g\n", worst, static_cast<double>(at));
}

TEST(Exp, SpecialValues) {
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-kInf), 0.0f);
  EXPECT_EQ(exp_f32(-87.31f), 0.0f);
  EXPECT_GT(exp_f32(-87.29f), 0.0f);
  EXPECT_EQ(exp_f32(kInf), kInf);
  EXPECT_EQ(exp_f32(88.73f), kInf);
  EXPECT_TRUE(std::isfinite(exp_f32(88.72f)));    // n = 128: still finite
  EXPECT_NEAR(exp_f32(88.72f), 3.3931e38, 1e34);  // e^88.72
  EXPECT_TRUE(std::isnan(exp_f32(kNaN)));
  // Through exp_acc: f32 by exp_f32, f64 by the library.
  EXPECT_EQ(kernels::cpu::exp_acc(1.5f), exp_f32(1.5f));
  EXPECT_EQ(kernels::cpu::exp_acc(1.5), std::exp(1.5));
}

#ifdef __AVX512F__
TEST(Exp, SixteenLanesEqualTheScalarForm) {
  std::vector<float> xs = sweep(-90.0f, 90.0f, 4099);
  for (float s : {kInf, -kInf, kNaN, 88.72f, 88.73f, -87.29f, -87.31f}) xs.push_back(s);
  while (xs.size() % 16 != 0) xs.push_back(0.0f);
  std::int64_t differ = 0;
  alignas(64) float y[16];
  for (std::size_t i = 0; i < xs.size(); i += 16) {
    _mm512_store_ps(y, kernels::cpu::exp_f32x16(_mm512_loadu_ps(xs.data() + i)));
    for (int l = 0; l < 16; ++l) {
      const float s = exp_f32(xs[i + l]);
      if (std::isnan(s) != std::isnan(y[l])) {
        ADD_FAILURE() << "NaN differs at x = " << xs[i + l];
      } else if (!std::isnan(s)) {
        // Both forms use FMA where the compiler contracts the scalar one; allow 1 ulp.
        const auto a = std::bit_cast<std::int32_t>(s), b = std::bit_cast<std::int32_t>(y[l]);
        if (a != b) ++differ;
        EXPECT_LE(std::abs(a - b), 1) << "x = " << xs[i + l] << ": " << s << " vs " << y[l];
      }
    }
  }
  EXPECT_LT(differ, static_cast<std::int64_t>(xs.size()) / 4);
}
#endif

}  // namespace
}  // namespace trident
