#include "trident/train/evaluate.h"

namespace trident::train::detail {

nn::ForwardContext evaluation_context(const Run& run) {
  nn::ForwardContext ctx;
  ctx.compute_dtype = run.compute_dtype;
  return ctx;
}

Evaluator::Evaluator(Run& run) : run_(run), eval_steps_(std::max<std::int64_t>(run.config.train.eval_steps, 1)) {
  TRIDENT_DCHECK(run.data.valid != nullptr, "Evaluator without validation data");
}

std::optional<double> Evaluator::evaluate(const std::function<bool()>& stop) {
  data::LoaderOptions vo = run_.loader_options;
  vo.consumed_samples = 0;
  vo.prefetch = 0;
  auto loader = run_.runner->reads_data() ? std::make_unique<data::DataLoader>(run_.data.valid, vo) : nullptr;
  if (loader && labels_ == 0) {
    data::EpochOrder order(run_.data.valid->size(), vo.seed);
    labels_ = labels_in(run_, *run_.data.valid, order, 0, eval_steps_ * run_.global_batch);
  }
  data::DataLoader* next = loader.get();
  BatchMover& on_device = *run_.on_device;
  // A masked LM's predictions are counted where its loss is computed (the last pipeline stage, every
  // tensor-parallel rank alike), then summed over the pipeline and the data-parallel ranks.
  const bool masked_lm = models::family(run_.spec.family).objective == models::Objective::masked_lm;
  nn::PredictionCounts counts;
  double loss = 0;
  for (std::int64_t g = 0; g < eval_steps_; ++g) {
    if (g > 0 && stop && stop()) return std::nullopt;
    loss += run_.runner->evaluate(
        run_.accum, [next, &on_device] { return on_device(next->next()); },
        [this, masked_lm, &counts](std::int64_t) {
          nn::ForwardContext ctx = evaluation_context(run_);
          if (masked_lm) ctx.predictions = &counts;
          return ctx;
        },
        labels_);
  }
  mlm_accuracy_.reset();
  if (masked_lm) {
    auto total = [&](std::int64_t n) {
      double x = static_cast<double>(n);
      if (run_.par.pipelined()) x = run_.par.pp->all_reduce_scalar(x, dist::ReduceOp::sum);
      return run_.par.dp_cp->all_reduce_scalar(x, dist::ReduceOp::sum);
    };
    const double correct = total(counts.correct), labelled = total(counts.labelled);
    mlm_accuracy_ = labelled > 0 ? correct / labelled : 0.0;
  }
  return loss;
}

}  // namespace trident::train::detail
