// Axis ranges, "nice" ticks and their labels (figure.h). Pure arithmetic, tested in tests/plot.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trident/core/error.h"
#include "trident/plot/figure.h"

namespace trident::plot {

namespace {

// The ticks k × step within [lo, hi] (a tiny tolerance keeps the ends that rounding moves out), with
// values next to zero made exactly zero (no "-0.0").
std::vector<double> multiples_in(double lo, double hi, double step) {
  std::vector<double> ticks;
  const double first = std::ceil(lo / step - 1e-9), last = std::floor(hi / step + 1e-9);
  for (double k = first; k <= last; ++k) ticks.push_back(std::abs(k) < 0.5 ? 0.0 : k * step);
  return ticks;
}

// The labels of a linear axis with ticks `step` apart: one shared ×10^e factor when the largest tick is
// below 10^-2 or from 10^6 up, and the fewest decimals that tell the ticks apart.
void label_linear(Axis& axis, double step) {
  double largest = 0;
  for (const double t : axis.ticks) largest = std::max(largest, std::abs(t));
  const int e = largest > 0 ? static_cast<int>(std::floor(std::log10(largest))) : 0;
  axis.exponent = (e <= -3 || e >= 6) ? e : 0;
  const double scale = std::pow(10.0, -axis.exponent);
  const double scaled_step = step * scale;
  const double mantissa = scaled_step / std::pow(10.0, std::floor(std::log10(scaled_step)));
  const bool two_and_a_half = std::abs(mantissa - 2.5) < 1e-6;
  axis.decimals = std::max(0, -static_cast<int>(std::floor(std::log10(scaled_step) + 1e-9)) + (two_and_a_half ? 1 : 0));
  axis.labels.clear();
  for (const double t : axis.ticks) axis.labels.push_back(fmt::format("{:.{}f}", t * scale, axis.decimals));
}

}  // namespace

double nice_step(double lo, double hi, int target) {
  TRIDENT_CHECK(std::isfinite(lo) && std::isfinite(hi) && hi > lo && target >= 2,
                "nice_step: needs a finite range lo < hi and 2 or more ticks, got [{}, {}] and {}", lo, hi, target);
  const double raw = (hi - lo) / (target - 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 2.5, 5.0}) {
    if (m * magnitude >= raw * (1 - 1e-9)) return m * magnitude;
  }
  return 10 * magnitude;
}

Axis linear_axis(double lo, double hi, int target, double margin, bool integer) {
  TRIDENT_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "linear_axis: needs a finite range, got [{}, {}]",
                lo, hi);
  if (lo == hi) {  // one value: a range around it
    const double d = std::max(lo == 0 || integer ? 1.0 : 0.0, std::abs(lo) * 0.1);
    lo -= d;
    hi += d;
  }
  const double pad = (hi - lo) * margin;
  Axis axis;
  axis.lo = lo - pad;
  axis.hi = hi + pad;
  // A nice step may leave fewer ticks than asked (one, even): ask for more until there are 3.
  const auto step_for = [&](int count) { return std::max(nice_step(axis.lo, axis.hi, count), integer ? 1.0 : 0.0); };
  double step = step_for(target);
  axis.ticks = multiples_in(axis.lo, axis.hi, step);
  for (int more = target + 1; axis.ticks.size() < 3 && more < target + 8; ++more) {
    step = step_for(more);
    axis.ticks = multiples_in(axis.lo, axis.hi, step);
  }
  label_linear(axis, step);
  return axis;
}

Axis log_axis(double lo, double hi, int min_ticks, double margin) {
  TRIDENT_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo > 0 && lo <= hi,
                "log_axis: needs a finite positive range, got [{}, {}]", lo, hi);
  double l = std::log10(lo), h = std::log10(hi);
  if (l == h) {  // one value: a fifth of a decade around it
    l -= 0.1;
    h += 0.1;
  }
  const double pad = (h - l) * margin;
  Axis axis;
  axis.log = true;
  axis.lo = std::pow(10.0, l - pad);
  axis.hi = std::pow(10.0, h + pad);
  const auto ticks_with = [&](std::initializer_list<double> mantissas) {
    std::vector<double> ticks;
    for (int k = static_cast<int>(std::floor(l - pad)); k <= static_cast<int>(std::ceil(h + pad)); ++k) {
      for (const double m : mantissas) {
        const double t = m * std::pow(10.0, k);
        if (t >= axis.lo * (1 - 1e-9) && t <= axis.hi * (1 + 1e-9)) ticks.push_back(t);
      }
    }
    return ticks;
  };
  axis.ticks = ticks_with({1});
  if (static_cast<int>(axis.ticks.size()) < min_ticks) axis.ticks = ticks_with({1, 2, 5});
  if (static_cast<int>(axis.ticks.size()) < min_ticks) axis.ticks = ticks_with({1, 2, 3, 4, 5, 6, 7, 8, 9});
  for (const double t : axis.ticks) axis.labels.push_back(fmt::format("{:g}", t));
  return axis;
}

}  // namespace trident::plot
