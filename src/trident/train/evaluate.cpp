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
  double loss = 0;
  for (std::int64_t g = 0; g < eval_steps_; ++g) {
    if (g > 0 && stop && stop()) return std::nullopt;
    loss += run_.runner->evaluate(
        run_.accum, [next, &on_device] { return on_device(next->next()); },
        [this](std::int64_t) { return evaluation_context(run_); }, labels_);
  }
  return loss;
}

}  // namespace trident::train::detail
