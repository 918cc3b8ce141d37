// Learning-rate schedules: linear warmup, then cosine, linear or constant
// decay to min_lr over decay_steps; or one-cycle (warm up to the peak over the
// first 30 % of the steps, then anneal with a cosine to min_lr).
#pragma once

#include <cstdint>
#include <string>

namespace trident::optim {

enum class Decay { cosine, linear, constant, one_cycle };
Decay parse_decay(const std::string& name);

struct ScheduleOptions {
  double peak_lr = 3e-4;
  double min_lr = 0.0;
  std::int64_t warmup_steps = 0;
  std::int64_t decay_steps = 0;  // the step count the decay spans (from step 0)
  Decay decay = Decay::cosine;
};

// The learning rate of (1-based) optimizer step `step`.
double learning_rate(const ScheduleOptions& options, std::int64_t step);

}  // namespace trident::optim
