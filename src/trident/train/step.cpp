#include "trident/train/step.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "trident/optim/optimizer.h"
#include "trident/train/setup.h"

namespace trident::train::detail {

nn::ForwardContext training_context(const Run& run, std::int64_t step, std::int64_t m) {
  return step_context(static_cast<std::uint64_t>(run.config.train.seed), step, m, run.accum, run.micro_batch,
                      run.par.dp_rank, run.par.dp_size, run.compute_dtype);
}

namespace {

// The step's mixture-of-experts statistics over the job: the auxiliary losses' part of the loss, each
// layer's busiest expert over the mean, and the dropped fraction. Summed over the data-parallel ranks
// (each routes its own tokens) and the pipeline stages (each holds its own layers); tensor-parallel
// ranks route the same tokens, so one of them counts.
StepMetrics::MoE moe_statistics(Run& run) {
  const nn::AuxLosses& aux = run.runner->step_aux();
  const std::int64_t L = run.spec.n_layer, E = run.spec.n_experts;
  // [aux, dropped, assignments, then each layer's routed count per expert], summed over micro-batches.
  std::vector<double> flat(static_cast<std::size_t>(3 + L * E), 0.0);
  flat[0] = aux.weighted_value;
  for (const auto& st : aux.stats) {
    flat[1] += static_cast<double>(st.dropped);
    flat[2] += static_cast<double>(st.assignments);
    for (std::int64_t e = 0; e < E; ++e)
      flat[static_cast<std::size_t>(3 + st.layer_index * E + e)] += static_cast<double>(st.tokens_per_expert[static_cast<std::size_t>(e)]);
  }
  // One collective per group, on the run's device (a GPU run's groups are NCCL).
  Tensor t = Tensor::from_vector(flat, Shape{static_cast<std::int64_t>(flat.size())}).to(run.device);
  if (run.par.dp_cp_size > 1) run.par.dp_cp->all_reduce_sync(t);
  if (run.par.pipelined()) run.par.pp->all_reduce_sync(t);
  flat = t.to(Device::cpu()).to_vector<double>();
  StepMetrics::MoE moe;
  moe.aux_loss = flat[0];
  moe.dropped_fraction = flat[2] > 0 ? flat[1] / flat[2] : 0.0;
  for (std::int64_t l = 0; l < L; ++l) {
    const double* counts = flat.data() + 3 + l * E;
    const double sum = std::accumulate(counts, counts + E, 0.0);
    if (sum == 0) continue;  // not a mixture-of-experts layer
    moe.load_imbalance.push_back(*std::max_element(counts, counts + E) / (sum / static_cast<double>(E)));
  }
  return moe;
}

}  // namespace

StepMetrics::Straggler straggler_report(Run& run, double work_seconds) {
  dist::Communicator& world = *run.par.world;
  const int n = world.size();
  if (run.rank_hosts.empty()) {  // once per run: each rank's host name, 64 bytes each
    constexpr std::int64_t kBytes = 64;
    std::vector<std::uint8_t> mine(kBytes, 0);
    const std::string& host = host_name();
    std::copy_n(host.begin(), std::min<std::size_t>(host.size(), kBytes - 1), mine.begin());
    Tensor all = Tensor::zeros(Shape{n * kBytes}, DType::u8);
    world.all_gather(Tensor::from_vector(mine, Shape{kBytes}), all, {.blocking = true})->wait();
    const auto bytes = all.to_vector<std::uint8_t>();
    for (int r = 0; r < n; ++r) {
      const auto* p = reinterpret_cast<const char*>(bytes.data() + r * kBytes);
      run.rank_hosts.emplace_back(p, strnlen(p, kBytes));
    }
  }
  Tensor works = Tensor::zeros(Shape{n}, DType::f64);
  world.all_gather(Tensor::from_vector(std::vector<double>{work_seconds}, Shape{1}), works, {.blocking = true})->wait();
  const std::vector<double> w = works.to_vector<double>();
  std::vector<double> sorted = w;
  std::sort(sorted.begin(), sorted.end());
  const double median = n % 2 ? sorted[static_cast<std::size_t>(n / 2)]
                              : 0.5 * (sorted[static_cast<std::size_t>(n / 2 - 1)] + sorted[static_cast<std::size_t>(n / 2)]);
  const auto slowest = static_cast<int>(std::max_element(w.begin(), w.end()) - w.begin());
  StepMetrics::Straggler s;
  s.rank = slowest;
  s.host = run.rank_hosts[static_cast<std::size_t>(slowest)];
  s.work_ms = w[static_cast<std::size_t>(slowest)] * 1e3;
  s.median_ms = median * 1e3;
  s.ratio = median > 0 ? w[static_cast<std::size_t>(slowest)] / median : 1.0;
  s.flagged = s.ratio >= run.config.log.straggler_threshold;
  return s;
}

std::optional<StepResult> train_step(Run& run, const ModelRunner::StopBefore& stop_before) {
  RunState& state = run.state;
  const std::int64_t step = state.step + 1;
  StepResult r;
  r.lr = optim::learning_rate(run.schedule, step);
  // DeepSpeed's OneCycle cycles Adam's beta1 with the learning rate (an optimizer without betas keeps its own).
  if (const auto betas = optim::cycled_betas(run.schedule, step)) {
    run.par.optimizer->set_method(optimizer_method(run.config, betas));
  }
  run.par.optimizer->zero_grad();
  const double loss_scale = run.fp16 ? run.scaler.scale() : 1.0;
  // Labels are counted where some are ignored: after end-of-document tokens, all but the masked ones, or
  // those whose target is padding.
  const bool padded = run.loader && run.data.train->padded();
  const bool masked =
      run.loader && (run.loader_options.masked_input_token >= 0 || run.loader_options.masking || padded);
  const double step_labels =
      masked ? labels_in(run, *run.data.train, *run.train_order, state.consumed_samples, run.global_batch)
             : run.tokens_per_step;
  r.tokens = padded ? static_cast<double>(data::real_tokens(*run.data.train, *run.train_order, state.consumed_samples,
                                                            run.global_batch, run.loader_options))
                    : run.tokens_per_step;
  const std::optional<double> loss = run.runner->train_step(
      run.accum, [&run] { return (*run.on_device)(run.loader->next()); },
      [&run, step](std::int64_t m) { return training_context(run, step, m); }, step_labels, loss_scale, stop_before);
  if (!loss) return std::nullopt;
  r.loss = *loss;
  if (run.spec.n_experts > 0) r.moe = moe_statistics(run);
  const double sumsq = run.runner->grad_sum_of_squares();
  const bool overflow = !std::isfinite(sumsq);
  // dist.gradient_reduce = "sum" (DeepSpeed's gradient_allreduce_op): the ranks' gradients added, not
  // averaged — data_parallel_size times the mean gradient, which clipping and the update then see.
  const double reduce_factor = run.config.dist.gradient_reduce == "sum" ? static_cast<double>(run.par.dp_size) : 1.0;
  r.grad_norm = std::sqrt(sumsq) / loss_scale * reduce_factor;
  if (run.fp16) {
    r.skipped = run.scaler.update(overflow);
  } else if (overflow && run.config.optim.skip_nonfinite_steps) {
    r.skipped = true;  // DeepSpeed's bf16 check_grad_overflow: the step is skipped, not the run stopped
  }
  TRIDENT_CHECK(run.fp16 || r.skipped || std::isfinite(r.loss),
                "training diverged at step {}: loss is {} (lower optim.lr or enable clipping)", step, r.loss);
  if (!r.skipped) {
    const double coef = optim::clip_coefficient(r.grad_norm, run.config.optim.clip_grad);
    run.par.optimizer->step(r.lr, coef * reduce_factor / loss_scale);
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
  m.tokens_per_s = result.tokens / seconds;
  // The rate reached is proof of what the machine can do: a step that outruns the peak measured at start
  // (measured in a busy moment) divides by its own rate, so MFU never reads above 100%. It counts every
  // token computed, padding included.
  const double achieved_gflops = run.flops_per_token * run.tokens_per_step / seconds / (1e9 * run.par.world->size());
  m.mfu = achieved_gflops / std::max(run.peak_gflops, achieved_gflops);
  m.peak_memory_mb = static_cast<double>(memory_stats(run.device).peak) / (1 << 20);
  m.eta_s = elapsed / static_cast<double>(step - first_step) * static_cast<double>(steps - step);
  m.loss_scale = run.fp16 ? run.scaler.scale() : 0;
  m.skipped = result.skipped;
  m.moe = result.moe;
  if (run.epoch_samples > 0) {
    m.epoch = static_cast<double>(run.state.consumed_samples) / static_cast<double>(run.epoch_samples);
    m.epochs = *run.config.train.epochs;
  }
  return m;
}

}  // namespace trident::train::detail
