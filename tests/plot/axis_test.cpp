// Axis ranges, "nice" ticks and tick labels (plot/figure.h).
#include <gtest/gtest.h>

#include <cmath>

#include "testing/helpers.h"
#include "trident/core/error.h"
#include "trident/plot/figure.h"

namespace trident::plot {
namespace {

using Labels = std::vector<std::string>;

TEST(NiceStep, IsOneTwoTwoAndAHalfOrFiveTimesAPowerOfTen) {
  EXPECT_DOUBLE_EQ(nice_step(0, 1200, 7), 200);  // 1200/6 = 200 exactly
  EXPECT_DOUBLE_EQ(nice_step(0, 1300, 7), 250);  // 216.7 rounds up to 250
  EXPECT_DOUBLE_EQ(nice_step(0, 3.3, 8), 0.5);   // 0.47
  EXPECT_DOUBLE_EQ(nice_step(0, 0.002, 5), 5e-4);
  EXPECT_DOUBLE_EQ(nice_step(5, 6, 11), 0.1);
  EXPECT_DOUBLE_EQ(nice_step(0, 9, 2), 10);  // 9 rounds up to the next decade
  EXPECT_DOUBLE_EQ(nice_step(-1, 1, 5), 0.5);
  EXPECT_NE(testing::error_message([] { nice_step(1, 1, 5); }), "");
  EXPECT_NE(testing::error_message([] { nice_step(0, NAN, 5); }), "");
}

TEST(LinearAxis, PadsTheRangeAndPutsTicksInside) {
  const Axis a = linear_axis(0, 1200, 8, 0.02);
  EXPECT_DOUBLE_EQ(a.lo, -24);
  EXPECT_DOUBLE_EQ(a.hi, 1224);
  EXPECT_EQ(a.ticks, (std::vector<double>{0, 200, 400, 600, 800, 1000, 1200}));
  EXPECT_EQ(a.labels, (Labels{"0", "200", "400", "600", "800", "1000", "1200"}));
  EXPECT_EQ(a.exponent, 0);
  for (const Axis& b : {linear_axis(2.13, 8.37, 8), linear_axis(-3, 0.2, 5), linear_axis(1e-5, 3e-5, 6)}) {
    ASSERT_GE(b.ticks.size(), 2u);
    for (const double t : b.ticks) {
      EXPECT_GE(t, b.lo);
      EXPECT_LE(t, b.hi);
    }
  }
}

TEST(LinearAxis, LabelsUseTheFewestDecimalsThatTellTicksApart) {
  EXPECT_EQ(linear_axis(5.3, 8.4, 8).labels, (Labels{"5.5", "6.0", "6.5", "7.0", "7.5", "8.0", "8.5"}));
  EXPECT_EQ(linear_axis(0, 10, 5, 0).labels, (Labels{"0.0", "2.5", "5.0", "7.5", "10.0"}));
  EXPECT_EQ(linear_axis(0, 1, 5, 0).labels, (Labels{"0.00", "0.25", "0.50", "0.75", "1.00"}));
  EXPECT_EQ(linear_axis(0, 100, 5, 0).labels, (Labels{"0", "25", "50", "75", "100"}));
  // A tick at zero reads 0, never -0.
  EXPECT_EQ(linear_axis(-1, 1, 3, 0).labels, (Labels{"-1", "0", "1"}));
}

TEST(LinearAxis, SmallOrLargeValuesShareOneFactor) {
  // A learning rate: ticks 0.0005 apart, labelled 0.5 ... 2.0 with ×10^-3 shown once.
  const Axis lr = linear_axis(4e-4, 2e-3, 5);
  EXPECT_EQ(lr.exponent, -3);
  EXPECT_EQ(lr.labels, (Labels{"0.5", "1.0", "1.5", "2.0"}));
  EXPECT_EQ(linear_axis(1e-5, 6e-5, 6, 0).exponent, -5);
  const Axis steps = linear_axis(0, 3e6, 4, 0);
  EXPECT_EQ(steps.exponent, 6);
  EXPECT_EQ(steps.labels, (Labels{"0", "1", "2", "3"}));
  // 0.01 .. 0.05 and up to 999999 keep plain labels.
  EXPECT_EQ(linear_axis(0.01, 0.05, 5, 0).exponent, 0);
  EXPECT_EQ(linear_axis(0, 500000, 6, 0).exponent, 0);
}

TEST(LinearAxis, AtLeastThreeTicksWhenFewAreAskedFor) {
  // A cosine learning rate in a short panel: a step of 0.002 would leave the lone tick 0.002.
  const Axis lr = linear_axis(1e-4, 2e-3, 3);
  EXPECT_EQ(lr.labels, (Labels{"0.5", "1.0", "1.5", "2.0"}));
  EXPECT_EQ(lr.exponent, -3);
  EXPECT_GE(linear_axis(0.9, 1.1, 2, 0).ticks.size(), 3u);
}

TEST(LinearAxis, ASinglePointGetsARangeAroundIt) {
  const Axis a = linear_axis(100, 100, 5, 0);
  EXPECT_DOUBLE_EQ(a.lo, 90);
  EXPECT_DOUBLE_EQ(a.hi, 110);
  EXPECT_EQ(a.labels, (Labels{"90", "95", "100", "105", "110"}));
  // Steps: whole numbers only, at least one apart.
  const Axis step = linear_axis(7, 7, 8, 0.02, true);
  EXPECT_EQ(step.labels, (Labels{"6", "7", "8"}));
  EXPECT_EQ(linear_axis(0, 3, 8, 0, true).labels, (Labels{"0", "1", "2", "3"}));
  const Axis zero = linear_axis(0, 0, 3, 0);
  EXPECT_DOUBLE_EQ(zero.lo, -1);
  EXPECT_DOUBLE_EQ(zero.hi, 1);
  EXPECT_NE(testing::error_message([] { linear_axis(2, 1, 5); }), "");
  EXPECT_NE(testing::error_message([] { linear_axis(0, INFINITY, 5); }), "");
}

TEST(LogAxis, PowersOfTenWhenSeveralFallInTheRange) {
  const Axis a = log_axis(0.05, 20, 3);
  EXPECT_TRUE(a.log);
  EXPECT_EQ(a.labels, (Labels{"0.1", "1", "10"}));
  EXPECT_LT(a.lo, 0.05);
  EXPECT_GT(a.hi, 20);
}

TEST(LogAxis, OneTwoFiveThenEveryDigitWhenTheRangeIsNarrow) {
  EXPECT_EQ(log_axis(0.9, 30, 3, 0).labels, (Labels{"1", "2", "5", "10", "20"}));
  // 1.6 .. 9: no power of ten, only 2 and 5 of 1-2-5: every digit.
  EXPECT_EQ(log_axis(1.6, 9, 3, 0).labels, (Labels{"2", "3", "4", "5", "6", "7", "8", "9"}));
  const Axis one = log_axis(3, 3, 3, 0);  // a single value: a fifth of a decade around it
  EXPECT_NEAR(std::log10(one.hi / one.lo), 0.2, 1e-12);
  EXPECT_NE(testing::error_message([] { log_axis(0, 1); }), "");
  EXPECT_NE(testing::error_message([] { log_axis(-1, 1); }), "");
}

}  // namespace
}  // namespace trident::plot
