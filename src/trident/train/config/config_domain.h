// The values a numeric config key accepts (train/config/config.h): each key row names one of these, the model
// options' table (train/config/model_options.cpp) as the other sections' rows in config.cpp.
#pragma once

#include <cmath>

namespace trident::train {

// Checked when the value is given (each element, for a list), so the error names the file or --set it came
// from: "must be <expected><the row's meaning>".
struct Domain {
  bool (*contains)(double);
  const char* expected;  // "must be ..."
};
inline constexpr Domain kAny{[](double) { return true; }, ""};
inline constexpr Domain kPositive{[](double v) { return v > 0; }, "positive"};
inline constexpr Domain kAtLeastOne{[](double v) { return v >= 1; }, "at least 1"};
inline constexpr Domain kNonNegative{[](double v) { return v >= 0; }, "0 or more"};
inline constexpr Domain kPositiveFinite{[](double v) { return std::isfinite(v) && v > 0; }, "a positive finite number"};
inline constexpr Domain kNonNegativeFinite{[](double v) { return std::isfinite(v) && v >= 0; }, "a finite number >= 0"};
inline constexpr Domain kFraction{[](double v) { return v >= 0 && v < 1; }, "in [0, 1)"};
inline constexpr Domain kProbability{[](double v) { return v > 0 && v <= 1; }, "in (0, 1]"};
inline constexpr Domain kZeroStage{[](double v) { return v == 0 || v == 1 || v == 2 || v == 3; }, "0, 1, 2 or 3"};

}  // namespace trident::train
