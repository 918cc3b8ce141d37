// Dynamic loss scaling for fp16 (as in Megatron and DeepSpeed).
//
// The loss is multiplied by scale() before backward. After backward, if any
// gradient overflowed the step is skipped and the scale halves; after
// `growth_interval` consecutive good steps it doubles. The optimiser un-scales
// through its grad_scale argument (1 / scale()).
#pragma once

#include <cstdint>

namespace trident::optim {

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(double initial_scale = 65536.0, std::int64_t growth_interval = 2000,
                             double min_scale = 1.0)
      : scale_(initial_scale), growth_interval_(growth_interval), min_scale_(min_scale) {}

  double scale() const noexcept { return scale_; }
  // Records the outcome of a step; returns true when the step must be skipped.
  bool update(bool found_overflow) noexcept {
    if (found_overflow) {
      scale_ = scale_ / 2 < min_scale_ ? min_scale_ : scale_ / 2;
      good_steps_ = 0;
      ++skipped_;
      return true;
    }
    if (++good_steps_ >= growth_interval_) {
      scale_ *= 2;
      good_steps_ = 0;
    }
    return false;
  }
  std::int64_t skipped_steps() const noexcept { return skipped_; }
  void set_scale(double s) noexcept { scale_ = s; }
  // Consecutive good steps since the scale last changed (checkpointed, so a
  // resumed run grows the scale when the uninterrupted one would).
  std::int64_t good_steps() const noexcept { return good_steps_; }
  void set_good_steps(std::int64_t n) noexcept { good_steps_ = n; }

 private:
  double scale_;
  std::int64_t growth_interval_;
  double min_scale_;
  std::int64_t good_steps_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace trident::optim
