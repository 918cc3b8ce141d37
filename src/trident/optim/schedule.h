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
//
// The deepspeed_* decays are DeepSpeed's schedulers of docs/deepspeed.md
// (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle), step for step: DeepSpeed
// sets the first step's rate when it builds the scheduler and advances it after
// each optimizer step, so step k uses the scheduler's index k − 2 (step 1 takes
// its start value). With W = max(2, warmup_steps), T = decay_steps, i = k − 2:
//   warmup (i < W), γ = ln(i + 1) / ln W (warmup_type log) or i / W (linear);
//   deepspeed_warmup        warmup_min_lr + γ (peak − warmup_min_lr), γ = 1 past W;
//   deepspeed_warmup_decay  the same, then γ = max(0, (T − i) / max(1, T − W));
//   deepspeed_warmup_cosine the warmup, then min_lr + (peak − min_lr)(1 + cos πp)/2,
//                           p = min(1, (i − W + 1) / max(1, T − W)); step 1 is 0;
//   deepspeed_one_cycle     min_lr → peak over cycle_first_step_size indices and back
//                           over cycle_second_step_size (stairs when the counts are
//                           set), then min_lr / (1 + decay_lr_rate (i − C + 1) /
//                           decay_step_size) past the cycle C; with cycle_momentum,
//                           beta1 cycles the other way between cycle_max_mom and
//                           cycle_min_mom (cycled_betas);
//   deepspeed_lr_range_test peak (1 + lr_range_test_step_rate (k − 1) / lr_range_test_step_size), the
//                           quotient rounded down with lr_range_test_staircase (peak is the start).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace trident::optim {

enum class Decay {
  cosine, linear, constant, one_cycle, wsd, inverse_sqrt,
  deepspeed_warmup, deepspeed_warmup_decay, deepspeed_warmup_cosine, deepspeed_one_cycle, deepspeed_lr_range_test
};
bool is_deepspeed(Decay decay);
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
  // DeepSpeed's schedulers (the deepspeed_* decays).
  bool log_warmup = false;     // warmup_type "log" rather than "linear"
  double warmup_min_lr = 0.0;  // where the warmup starts
  double cycle_first_step_size = 2000;
  double cycle_second_step_size = 2000;
  std::int64_t cycle_first_stair_count = 0;  // 0: no stairs
  std::int64_t cycle_second_stair_count = 0;
  double decay_step_size = 0;  // 0: no decay after the cycle
  double decay_lr_rate = 0;
  bool cycle_momentum = false;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0;
  double lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

// The learning rate of (1-based) optimizer step `step`.
double learning_rate(const ScheduleOptions& options, std::int64_t step);
// The optimizer's (beta1, beta2) at step `step` when deepspeed_one_cycle cycles the momentum: DeepSpeed sets
// the betas to (the cycled momentum, 0.99). Empty otherwise.
std::optional<std::pair<double, double>> cycled_betas(const ScheduleOptions& options, std::int64_t step);

}  // namespace trident::optim
