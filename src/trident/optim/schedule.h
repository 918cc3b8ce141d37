// Learning-rate schedules, as Megatron-LM's: linear warmup from 0 to the peak
// over warmup_steps, then
//   cosine, linear  decay to min_lr at step decay_steps (min_lr after it);
//   constant        the peak;
//   wsd             warmup-stable-decay: the peak until the last
//                   wsd_decay_steps of decay_steps, then down to min_lr along
//                   wsd_style, with r the fraction of those steps done:
//                   linear 1 − r, cosine (1 + cos πr)/2, exponential
//                   2·0.5^r − 1, minus_sqrt 1 − √r (the factor on peak − min_lr);
//   inverse_sqrt    peak · √warmup / √step, never below min_lr, and min_lr
//                   after decay_steps (as every decay above);
// or one-cycle (warm up to the peak over the first 30 % of the steps, then
// anneal with a cosine to min_lr).
#pragma once

#include <cstdint>
#include <string>

namespace trident::optim {

enum class Decay { cosine, linear, constant, one_cycle, wsd, inverse_sqrt };
Decay parse_decay(const std::string& name);

enum class WsdStyle { linear, cosine, exponential, minus_sqrt };
WsdStyle parse_wsd_style(const std::string& name);

struct ScheduleOptions {
  double peak_lr = 3e-4;
  double min_lr = 0.0;
  std::int64_t warmup_steps = 0;
  std::int64_t decay_steps = 0;  // the step count the decay spans (from step 0)
  Decay decay = Decay::cosine;
  std::int64_t wsd_decay_steps = 0;  // wsd: the steps of the final decay, ending at decay_steps
  WsdStyle wsd_style = WsdStyle::exponential;
};

// The learning rate of (1-based) optimizer step `step`.
double learning_rate(const ScheduleOptions& options, std::int64_t step);

}  // namespace trident::optim
