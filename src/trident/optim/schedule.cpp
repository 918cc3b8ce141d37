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
  if (name == "deepspeed_warmup") return Decay::deepspeed_warmup;
  if (name == "deepspeed_warmup_decay") return Decay::deepspeed_warmup_decay;
  if (name == "deepspeed_warmup_cosine") return Decay::deepspeed_warmup_cosine;
  if (name == "deepspeed_one_cycle") return Decay::deepspeed_one_cycle;
  if (name == "deepspeed_lr_range_test") return Decay::deepspeed_lr_range_test;
  TRIDENT_FAIL("schedule.decay: unknown decay '{}' (expected cosine, linear, constant, one_cycle, wsd, inverse_sqrt, "
               "deepspeed_warmup, deepspeed_warmup_decay, deepspeed_warmup_cosine, deepspeed_one_cycle or "
               "deepspeed_lr_range_test)",
               name);
}

bool is_deepspeed(Decay d) {
  return d == Decay::deepspeed_warmup || d == Decay::deepspeed_warmup_decay || d == Decay::deepspeed_warmup_cosine ||
         d == Decay::deepspeed_one_cycle || d == Decay::deepspeed_lr_range_test;
}

WsdStyle parse_wsd_style(const std::string& name) {
  if (name == "linear") return WsdStyle::linear;
  if (name == "cosine") return WsdStyle::cosine;
  if (name == "exponential") return WsdStyle::exponential;
  if (name == "minus_sqrt") return WsdStyle::minus_sqrt;
  TRIDENT_FAIL("schedule.wsd_decay_style: unknown style '{}' (expected linear, cosine, exponential or minus_sqrt)",
               name);
}

namespace {

// DeepSpeed's schedulers at their index i = step − 2 (docs/deepspeed.md; the formulas are in schedule.h).
double warmup_fraction(const ScheduleOptions& o, double i, double w) {
  return o.log_warmup ? std::log(i + 1) / std::log(w) : i / w;
}

// OneCycle's position in its cycle, 0 at cycle_min_lr and 1 at the peak.
double one_cycle_scale(const ScheduleOptions& o, double i) {
  const double first = o.cycle_first_step_size, second = o.cycle_second_step_size, total = first + second;
  const double b = i + 1;
  const double x = 1 + b / total - std::floor(1 + b / total);
  const double ratio = first / total;
  const bool rising = x <= ratio;
  double scale = rising ? x / ratio : (x - 1) / (ratio - 1);
  const std::int64_t stairs = rising ? o.cycle_first_stair_count : o.cycle_second_stair_count;
  if (stairs > 0) {  // held flat over each stair, counted from the integer position in the cycle
    const double c = std::fmod(b, total);
    const double position = c <= first ? c * static_cast<double>(stairs) / first
                                       : (total - c) * static_cast<double>(stairs) / second;
    scale = std::floor(position) / static_cast<double>(stairs);
  }
  return scale;
}

double deepspeed_rate(const ScheduleOptions& o, std::int64_t step) {
  const double i = static_cast<double>(step - 2);
  if (o.decay == Decay::deepspeed_lr_range_test) {
    const double interval = (i + 1) / o.lr_range_test_step_size;
    return o.peak_lr * (1 + o.lr_range_test_step_rate * (o.lr_range_test_staircase ? std::floor(interval) : interval));
  }
  if (o.decay == Decay::deepspeed_one_cycle) {
    if (i < 0) return o.min_lr;
    const double total = o.cycle_first_step_size + o.cycle_second_step_size;
    if (i < total) return o.min_lr + (o.peak_lr - o.min_lr) * one_cycle_scale(o, i);
    if (o.decay_step_size == 0 || o.decay_lr_rate == 0) return o.min_lr;
    return o.min_lr / (1 + o.decay_lr_rate * (i - total + 1) / o.decay_step_size);
  }
  if (i < 0) return o.decay == Decay::deepspeed_warmup_cosine ? 0.0 : o.warmup_min_lr;
  const double w = static_cast<double>(std::max<std::int64_t>(2, o.warmup_steps));
  const double t = static_cast<double>(o.decay_steps);
  if (i < w) return o.warmup_min_lr + (o.peak_lr - o.warmup_min_lr) * warmup_fraction(o, i, w);
  if (o.decay == Decay::deepspeed_warmup) return o.peak_lr;
  if (o.decay == Decay::deepspeed_warmup_decay) {
    return o.warmup_min_lr + (o.peak_lr - o.warmup_min_lr) * std::max(0.0, (t - i) / std::max(1.0, t - w));
  }
  const double p = std::min(1.0, (i - w + 1) / std::max(1.0, t - w));
  return std::max(0.0, o.min_lr + (o.peak_lr - o.min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * p)));
}

}  // namespace

std::optional<std::pair<double, double>> cycled_betas(const ScheduleOptions& o, std::int64_t step) {
  if (o.decay != Decay::deepspeed_one_cycle || !o.cycle_momentum) return std::nullopt;
  const double i = static_cast<double>(step - 2);
  constexpr double kBeta2 = 0.99;  // DeepSpeed's OneCycle writes (momentum, 0.99) into the betas
  if (i < 0) return std::pair{o.cycle_min_mom, kBeta2};
  const double total = o.cycle_first_step_size + o.cycle_second_step_size;
  if (i < total) return std::pair{o.cycle_max_mom - (o.cycle_max_mom - o.cycle_min_mom) * one_cycle_scale(o, i), kBeta2};
  if (o.decay_step_size == 0 || o.decay_mom_rate == 0) return std::pair{o.cycle_max_mom, kBeta2};
  return std::pair{o.cycle_max_mom * (1 + o.decay_mom_rate * (i - total + 1) / o.decay_step_size), kBeta2};
}

double learning_rate(const ScheduleOptions& o, std::int64_t step) {
  if (is_deepspeed(o.decay)) return deepspeed_rate(o, step);
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
