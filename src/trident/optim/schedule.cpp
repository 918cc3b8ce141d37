#include "trident/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "trident/core/error.h"

namespace trident::optim {

Decay parse_decay(const std::string& name) {
  if (name == "cosine") return Decay::cosine;
  if (name == "linear") return Decay::linear;
  if (name == "constant") return Decay::constant;
  if (name == "one_cycle") return Decay::one_cycle;
  if (name == "wsd") return Decay::wsd;
  if (name == "inverse_sqrt") return Decay::inverse_sqrt;
  TRIDENT_FAIL("schedule.decay: unknown decay '{}' (expected cosine, linear, constant, one_cycle, wsd or inverse_sqrt)",
               name);
}

WsdStyle parse_wsd_style(const std::string& name) {
  if (name == "linear") return WsdStyle::linear;
  if (name == "cosine") return WsdStyle::cosine;
  if (name == "exponential") return WsdStyle::exponential;
  if (name == "minus_sqrt") return WsdStyle::minus_sqrt;
  TRIDENT_FAIL("schedule.wsd_decay_style: unknown style '{}' (expected linear, cosine, exponential or minus_sqrt)",
               name);
}

double learning_rate(const ScheduleOptions& o, std::int64_t step) {
  const double s = static_cast<double>(step);
  const double total = static_cast<double>(std::max<std::int64_t>(o.decay_steps, 1));
  if (o.decay == Decay::one_cycle) {
    const double up = std::max(1.0, 0.3 * total);
    if (s <= up) return o.min_lr + (o.peak_lr - o.min_lr) * s / up;
    const double t = std::clamp((s - up) / std::max(1.0, total - up), 0.0, 1.0);
    return o.min_lr + 0.5 * (o.peak_lr - o.min_lr) * (1 + std::cos(std::numbers::pi * t));
  }
  if (o.warmup_steps > 0 && step <= o.warmup_steps) {
    return o.peak_lr * s / static_cast<double>(o.warmup_steps);
  }
  if (o.decay == Decay::constant) return o.peak_lr;
  if (o.decay == Decay::inverse_sqrt) {
    // As Megatron's: past decay_steps (train.steps unless set) every decaying style is at min_lr.
    if (s > total) return o.min_lr;
    const double warmup = static_cast<double>(std::max<std::int64_t>(o.warmup_steps, 1));
    return std::max(o.min_lr, o.peak_lr * std::sqrt(warmup / std::max(s, 1.0)));
  }
  const auto cosine = [](double t) { return 0.5 * (1 + std::cos(std::numbers::pi * t)); };
  if (o.decay == Decay::wsd) {
    const double decay = static_cast<double>(std::max<std::int64_t>(o.wsd_decay_steps, 1));
    const double r = std::clamp((s - (total - decay)) / decay, 0.0, 1.0);
    double factor = 1.0;
    switch (o.wsd_style) {
      case WsdStyle::linear:
        factor = 1 - r;
        break;
      case WsdStyle::cosine:
        factor = cosine(r);
        break;
      case WsdStyle::exponential:
        factor = 2 * std::pow(0.5, r) - 1;
        break;
      case WsdStyle::minus_sqrt:
        factor = 1 - std::sqrt(r);
        break;
    }
    return o.min_lr + factor * (o.peak_lr - o.min_lr);
  }
  const double span = std::max(1.0, total - static_cast<double>(o.warmup_steps));
  const double t = std::clamp((s - static_cast<double>(o.warmup_steps)) / span, 0.0, 1.0);
  if (o.decay == Decay::linear) return o.peak_lr + (o.min_lr - o.peak_lr) * t;
  return o.min_lr + (o.peak_lr - o.min_lr) * cosine(t);
}

}  // namespace trident::optim
