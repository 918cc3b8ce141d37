#include "trident/train/step.h"

#include <algorithm>
#include <cmath>

#include "trident/optim/optimizer.h"

namespace trident::train::detail {

nn::ForwardContext training_context(const Run& run, std::int64_t step, std::int64_t m) {
  nn::ForwardContext ctx;
  ctx.training = true;
  ctx.seed = static_cast<std::uint64_t>(run.config.train.seed);
  ctx.step = step;
  ctx.global_batch = run.global_batch;
  ctx.batch_offset = m * run.micro_batch * run.par.dp_size + run.par.dp_rank * run.micro_batch;
  ctx.compute_dtype = run.compute_dtype;
  return ctx;
}

namespace {

// The step's mixture-of-experts statistics over the data-parallel ranks: the auxiliary losses' part of
// the loss, each layer's busiest expert over the mean, and the dropped fraction.
StepMetrics::MoE moe_statistics(Run& run) {
  const nn::AuxLosses& aux = run.runner->step_aux();
  StepMetrics::MoE moe;
  // The layers' routed counts summed over micro-batches, in layer order; then over the ranks.
  std::vector<std::string> layers;
  std::vector<std::vector<double>> routed;
  double dropped = 0, assignments = 0;
  for (const auto& st : aux.stats) {
    auto at = std::find(layers.begin(), layers.end(), st.layer);
    if (at == layers.end()) {
      layers.push_back(st.layer);
      routed.emplace_back(st.tokens_per_expert.size(), 0.0);
      at = layers.end() - 1;
    }
    auto& counts = routed[static_cast<std::size_t>(at - layers.begin())];
    for (std::size_t e = 0; e < counts.size(); ++e) counts[e] += static_cast<double>(st.tokens_per_expert[e]);
    dropped += static_cast<double>(st.dropped);
    assignments += static_cast<double>(st.assignments);
  }
  std::vector<double> flat = {aux.weighted_value, dropped, assignments};
  for (const auto& counts : routed) flat.insert(flat.end(), counts.begin(), counts.end());
  // Host values, as the loss's (a GPU run's data-parallel group is NCCL; all_reduce_scalar takes host values).
  if (run.par.dp_size > 1) {
    for (double& v : flat) v = run.par.dp->all_reduce_scalar(v, dist::ReduceOp::sum);
  }
  moe.aux_loss = flat[0];
  moe.dropped_fraction = flat[2] > 0 ? flat[1] / flat[2] : 0.0;
  std::size_t k = 3;
  for (const auto& counts : routed) {
    double sum = 0, max = 0;
    for (std::size_t e = 0; e < counts.size(); ++e, ++k) {
      sum += flat[k];
      max = std::max(max, flat[k]);
    }
    moe.load_imbalance.push_back(sum > 0 ? max / (sum / static_cast<double>(counts.size())) : 0.0);
  }
  return moe;
}

}  // namespace

std::optional<StepResult> train_step(Run& run, const ModelRunner::StopBefore& stop_before) {
  RunState& state = run.state;
  const std::int64_t step = state.step + 1;
  StepResult r;
  r.lr = optim::learning_rate(run.schedule, step);
  run.par.optimizer->zero_grad();
  const double loss_scale = run.fp16 ? run.scaler.scale() : 1.0;
  // Labels are counted where some are ignored: after end-of-document tokens, or all but the masked ones.
  const bool masked = run.loader && (run.loader_options.masked_input_token >= 0 || run.loader_options.masking);
  const double step_labels =
      masked ? labels_in(run, *run.data.train, *run.train_order, state.consumed_samples, run.global_batch)
             : run.tokens_per_step;
  const std::optional<double> loss = run.runner->train_step(
      run.accum, [&run] { return (*run.on_device)(run.loader->next()); },
      [&run, step](std::int64_t m) { return training_context(run, step, m); }, step_labels, loss_scale, stop_before);
  if (!loss) return std::nullopt;
  r.loss = *loss;
  if (run.spec.n_experts > 0) r.moe = moe_statistics(run);
  const double sumsq = run.runner->grad_sum_of_squares();
  const bool overflow = !std::isfinite(sumsq);
  r.grad_norm = std::sqrt(sumsq) / loss_scale;
  if (run.fp16) r.skipped = run.scaler.update(overflow);
  TRIDENT_CHECK(run.fp16 || std::isfinite(r.loss),
                "training diverged at step {}: loss is {} (lower optim.lr or enable clipping)", step, r.loss);
  if (!r.skipped) {
    const double coef = optim::clip_coefficient(r.grad_norm, run.config.optim.clip_grad);
    run.par.optimizer->step(r.lr, coef / loss_scale);
  }
  state.step = step;
  state.consumed_samples += run.global_batch;
  state.lr = r.lr;
  state.loss_scale = run.fp16 ? run.scaler.scale() : 0;
  state.loss_scale_good_steps = run.fp16 ? run.scaler.good_steps() : 0;
  state.loss_scale_hysteresis_left = run.fp16 ? run.scaler.hysteresis_left() : 0;
  return r;
}

StepMetrics step_metrics(const Run& run, const StepResult& result, double seconds, double elapsed,
                         std::int64_t first_step) {
  const std::int64_t step = run.state.step, steps = run.config.train.steps;
  StepMetrics m;
  m.step = step;
  m.steps = steps;
  m.loss = result.loss;
  m.lr = result.lr;
  m.grad_norm = result.grad_norm;
  m.step_ms = seconds * 1e3;
  m.tokens_per_s = run.tokens_per_step / seconds;
  m.mfu = run.flops_per_token * m.tokens_per_s / (run.peak_gflops * 1e9 * run.par.world->size());
  m.peak_memory_mb = static_cast<double>(memory_stats(run.device).peak) / (1 << 20);
  m.eta_s = elapsed / static_cast<double>(step - first_step) * static_cast<double>(steps - step);
  m.loss_scale = run.fp16 ? run.scaler.scale() : 0;
  m.skipped = result.skipped;
  m.moe = result.moe;
  return m;
}

}  // namespace trident::train::detail
