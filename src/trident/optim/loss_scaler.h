// Dynamic loss scaling for fp16 (as in Megatron and DeepSpeed).
//
// The loss is multiplied by scale() before backward. After backward, if any
// gradient overflowed the step is skipped and the scale halves (never below
// `min_scale`); after `growth_interval` consecutive good steps it doubles. With
// `hysteresis` h > 1 the first h − 1 overflows since the scale last grew skip
// their step without halving (DeepSpeed's "hysteresis", docs/deepspeed.md).
// The optimiser un-scales through its grad_scale argument (1 / scale()).
#pragma once

#include <cstdint>

namespace trident::optim {

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(double initial_scale = 65536.0, std::int64_t growth_interval = 2000,
                             double min_scale = 1.0, std::int64_t hysteresis = 1)
      : scale_(initial_scale),
        growth_interval_(growth_interval),
        min_scale_(min_scale),
        hysteresis_(hysteresis),
        hysteresis_left_(hysteresis) {}

  double scale() const noexcept { return scale_; }
  // Records the outcome of a step; returns true when the step must be skipped.
  bool update(bool found_overflow) noexcept {
    if (found_overflow) {
      if (hysteresis_left_ > 1) {
        --hysteresis_left_;
      } else {
        scale_ = scale_ / 2 < min_scale_ ? min_scale_ : scale_ / 2;
      }
      good_steps_ = 0;
      ++skipped_;
      return true;
    }
    if (++good_steps_ >= growth_interval_) {
      scale_ *= 2;
      good_steps_ = 0;
      hysteresis_left_ = hysteresis_;
    }
    return false;
  }
  std::int64_t skipped_steps() const noexcept { return skipped_; }
  void set_scale(double s) noexcept { scale_ = s; }
  // Consecutive good steps since the scale last changed (checkpointed, so a
  // resumed run grows the scale when the uninterrupted one would).
  std::int64_t good_steps() const noexcept { return good_steps_; }
  void set_good_steps(std::int64_t n) noexcept { good_steps_ = n; }
  // Overflows left before the scale halves (checkpointed with good_steps).
  std::int64_t hysteresis_left() const noexcept { return hysteresis_left_; }
  void set_hysteresis_left(std::int64_t n) noexcept { hysteresis_left_ = n; }

 private:
  double scale_;
  std::int64_t growth_interval_;
  double min_scale_;
  std::int64_t hysteresis_;
  std::int64_t hysteresis_left_;
  std::int64_t good_steps_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace trident::optim
