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
  TRIDENT_FAIL("schedule.decay: unknown decay '{}' (expected cosine, linear, constant or one_cycle)", name);
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
  const double span = std::max(1.0, total - static_cast<double>(o.warmup_steps));
  const double t = std::clamp((s - static_cast<double>(o.warmup_steps)) / span, 0.0, 1.0);
  if (o.decay == Decay::linear) return o.peak_lr + (o.min_lr - o.peak_lr) * t;
  return o.min_lr + 0.5 * (o.peak_lr - o.min_lr) * (1 + std::cos(std::numbers::pi * t));
}

}  // namespace trident::optim
