#include "trident/train/model_runner.h"

#include <map>

#include "trident/autograd/autograd.h"

namespace trident::train::detail {

namespace pl = trident::parallel::pipeline;
using autograd::Variable;

ModelRunner::ModelRunner(const models::TransformerSpec& spec, ParallelState& par, Options options)
    : par_(par), spec_(spec), options_(std::move(options)) {
  const models::ModelParallel mp = par.model_parallel();
  if (!par.pipelined()) {
    chunks_.push_back(std::make_unique<models::TransformerLM>(spec, mp));
  } else {
    const int p = par.pp_size, v = par.chunks;
    const auto ranges = models::family(spec.family).partition(spec.n_layer, p * v, options_.stage_layers);
    for (int c = 0; c < v; ++c) {
      chunks_.push_back(std::make_unique<models::TransformerLM>(spec, mp, ranges[static_cast<std::size_t>(c * p + par.pp_rank)]));
    }
    executor_ = std::make_unique<pl::Executor>(par.pp, v);
    // A stage's activations: this rank's tokens of each sequence (its cp chunks, then its sequence-parallel
    // slice of those).
    const std::int64_t t = par.sequence_parallel ? par.tp_size : 1;
    boundary_ = pl::Boundary{Shape{options_.micro_batch_size, options_.seq_len / par.cp_size / t, spec.d_model},
                             options_.compute_dtype, options_.device};
  }
  for (const auto& chunk : chunks_) {
    for (nn::Parameter* q : chunk->parameters()) params_.push_back(q);
  }
}

std::optional<double> ModelRunner::train_step(std::int64_t micro_batches, const NextBatch& next,
                                              const ContextOf& context, double normalizer, double loss_scale,
                                              const StopBefore& stop_before) {
  if (par_.pipelined()) {
    const auto list = pl::build(options_.schedule,
                                pl::ScheduleOptions{par_.pp_size, static_cast<int>(micro_batches), par_.chunks},
                                par_.pp_rank);
    return pipeline_pass(list, micro_batches, next, context, normalizer, loss_scale);
  }
  const models::TransformerLM& model = *chunks_.front();
  double local = 0;
  step_aux_.clear();
  for (std::int64_t m = 0; m < micro_batches; ++m) {
    const bool last = m + 1 == micro_batches;
    // Before any bucket of GradSync is launched (it launches during the last micro-batch's backward) and
    // before ZeRO's last reduction: abandoning here leaves no communication in flight.
    if (m > 0 && stop_before && stop_before(m)) return std::nullopt;
    data::Batch b = own_chunks(next());
    if (par_.grad_sync) par_.grad_sync->begin_micro_batch(last);
    nn::ForwardContext ctx = context_of(context, m);
    set_masks(ctx, b);
    if (spec_.n_experts > 0) ctx.aux = &step_aux_;
    Variable loss = model.loss(b.tokens, b.labels, ctx, normalizer);
    step_aux_.losses.clear();  // (their values are in weighted_value; the graph goes with `loss`)
    local += loss.data().item();
    if (loss_scale != 1.0) loss = autograd::scale(loss, loss_scale);
    loss.backward();
    if (par_.zero) par_.zero->reduce_gradients(last);
  }
  if (par_.grad_sync) par_.grad_sync->finish();
  // Each rank's loss is its share of the global-batch mean (its samples, and under cp its chunks of them).
  return par_.dp_cp->all_reduce_scalar(local, dist::ReduceOp::sum);
}

double ModelRunner::pipeline_pass(const std::vector<pl::Instruction>& list, std::int64_t micro_batches,
                                  const NextBatch& next, const ContextOf& context, double normalizer,
                                  double loss_scale) {
  std::map<int, data::Batch> batches;
  double local = 0;  // the losses computed here (last stage)
  // A mixture of experts' auxiliary losses leave each chunk beside its activation (side_loss), weighted
  // as TransformerLM::loss weights them: by the micro-batch's share of the global batch's tokens.
  nn::AuxLosses chunk_aux;
  step_aux_.clear();
  pl::StepCallbacks cb;
  cb.load = [&](int mb) { batches[mb] = own_chunks(next()); };
  cb.side_loss = [&](int, int) -> Variable {
    step_aux_.stats.insert(step_aux_.stats.end(), chunk_aux.stats.begin(), chunk_aux.stats.end());
    Variable aux = chunk_aux.total();
    chunk_aux.clear();
    if (!aux.defined()) return aux;
    const auto rows = static_cast<double>(options_.micro_batch_size * options_.seq_len);
    aux = autograd::scale(aux, normalizer > 0 ? rows / normalizer : 1.0);
    step_aux_.weighted_value += aux.data().item();
    return loss_scale != 1.0 ? autograd::scale(aux, loss_scale) : aux;
  };
  cb.forward = [&](int mb, int chunk, const Variable& input) -> Variable {
    const models::TransformerLM& model = *chunks_[static_cast<std::size_t>(chunk)];
    nn::ForwardContext ctx = context_of(context, mb);
    if (spec_.n_experts > 0 && ctx.training) ctx.aux = &chunk_aux;
    auto batch = batches.find(mb);
    if (batch == batches.end() && options_.attention_masks) {
      // A middle stage reads the micro-batches for their attention masks as it meets them: in order, since
      // every schedule runs the first chunk's forwards in micro-batch order.
      TRIDENT_CHECK(mb == static_cast<int>(batches.size()), "pipeline: micro-batch {} met before micro-batch {}",
                    mb, batches.size());
      batch = batches.emplace(mb, own_chunks(next())).first;
    }
    const bool needs_batch = model.stage().embed || model.stage().head;
    TRIDENT_CHECK(!needs_batch || batch != batches.end(), "pipeline: micro-batch {} was not loaded", mb);
    if (batch != batches.end()) set_masks(ctx, batch->second);
    Variable h = model.stage_forward(model.stage().embed ? batch->second.tokens : Tensor(), input, ctx);
    if (!model.stage().head) return h;
    const Variable logits = model.head_local(h, ctx);
    if (ctx.predictions != nullptr) model.count_predictions(logits.data(), batch->second.labels, *ctx.predictions);
    Variable loss = model.logits_loss(logits, batch->second.labels, normalizer);
    local += loss.data().item();
    return loss_scale != 1.0 ? autograd::scale(loss, loss_scale) : loss;
  };
  const bool training = autograd::grad_enabled();
  if (training) {
    cb.before_backward = [&](int mb, int) {
      // One chunk: the step's last backward is micro-batch m − 1's, so DP can overlap it.
      if (par_.grad_sync) par_.grad_sync->begin_micro_batch(par_.chunks == 1 && mb + 1 == micro_batches);
    };
    cb.reduce = [&] { reduce_gradients(); };
  }
  executor_->run(list, boundary_, cb);
  // The loss as the single process reports it: the last stages' losses and every stage's auxiliary losses.
  const double mine = par_.tp_rank == 0 ? (par_.last_stage() ? local : 0.0) + step_aux_.weighted_value : 0.0;
  return par_.world->all_reduce_scalar(mine, dist::ReduceOp::sum);
}

data::Batch ModelRunner::own_chunks(data::Batch b) const {
  const parallel::context::ChunkLayout layout = chunk_layout();
  if (!layout.active()) return b;
  if (b.tokens.defined()) b.tokens = layout.take(b.tokens, 1);
  if (b.labels.defined()) b.labels = layout.take(b.labels, 1);
  return b;  // key_mask and document_starts stay whole: attention reads them at global positions
}

parallel::context::ChunkLayout ModelRunner::chunk_layout() const {
  return {par_.cp_rank, par_.cp_size, options_.seq_len};
}

nn::ForwardContext ModelRunner::context_of(const ContextOf& context, std::int64_t m) const {
  nn::ForwardContext ctx = context(m);
  ctx.context = chunk_layout();
  return ctx;
}

void ModelRunner::set_masks(nn::ForwardContext& ctx, const data::Batch& b) const {
  ctx.key_mask = b.key_mask;
  ctx.document_starts = b.document_starts;
  ctx.document_attention = options_.document_attention;
  ctx.document_positions = options_.document_positions;
}

void ModelRunner::reduce_gradients() {
  if (par_.grad_sync) {
    if (par_.chunks > 1) par_.grad_sync->begin_micro_batch(true);  // launch every bucket now
    par_.grad_sync->finish();
    all_reduce_tied_embeddings();  // after DP: the buckets may still have been in flight
  } else {
    all_reduce_tied_embeddings();
    if (par_.zero) par_.zero->reduce_gradients(true);
  }
}

void ModelRunner::all_reduce_tied_embeddings() {
  if (!spec_.tie_embeddings || par_.embedding->size() == 1) return;
  for (const auto& chunk : chunks_) {
    nn::Parameter* wte = chunk->token_embedding();
    if (!wte) continue;
    Tensor g = wte->var.grad();
    TRIDENT_CHECK(g.defined(), "pipeline: the token embedding '{}' has no gradient to share with the {} stage",
                  wte->name, chunk->stage().embed ? "last" : "first");
    // Two ranks: each gets a + b in the same rounding, so both copies stay equal.
    par_.embedding->all_reduce_sync(g);
  }
}

double ModelRunner::evaluate(std::int64_t batches, const NextBatch& next, const ContextOf& context,
                             double normalizer) {
  autograd::NoGradGuard no_grad;
  if (par_.pipelined()) {
    const auto list =
        pl::build_forward_only(pl::ScheduleOptions{par_.pp_size, static_cast<int>(batches), par_.chunks}, par_.pp_rank);
    return pipeline_pass(list, batches, next, context, normalizer, 1.0);
  }
  double total = 0;
  for (std::int64_t i = 0; i < batches; ++i) {
    data::Batch b = own_chunks(next());
    nn::ForwardContext ctx = context_of(context, i);
    set_masks(ctx, b);
    total += chunks_.front()->loss(b.tokens, b.labels, ctx, normalizer).data().item();
  }
  return par_.dp_cp->all_reduce_scalar(total, dist::ReduceOp::sum);
}

double ModelRunner::grad_sum_of_squares() {
  // Each parameter counted once over the job: replicated ones (over tensor-parallel ranks too) as they
  // are; tensor-parallel shards summed over the tensor-parallel group; experts summed over the
  // expert-parallel group (its ranks hold different experts; their replicas are the optimizer's business).
  enum class Kind { replicated, tensor_parallel, expert };
  auto part = [&](Kind kind) {
    std::vector<nn::Parameter*> subset;
    for (nn::Parameter* p : params_) {
      const Kind k = p->expert_parallel ? Kind::expert : p->tensor_parallel ? Kind::tensor_parallel : Kind::replicated;
      if (!p->tied_copy && k == kind) subset.push_back(p);
    }
    return par_.zero ? par_.zero->grad_sum_of_squares(subset) : optim::grad_sum_of_squares(subset);
  };
  // Under ZeRO each part is a collective: run them in one order on every rank. A group of one still
  // has its part (a vocabulary table padded on one rank is a "shard" of it).
  double s = part(Kind::replicated);
  const double tp_part = part(Kind::tensor_parallel), ep_part = part(Kind::expert);
  s += par_.tp_size > 1 ? par_.tp->all_reduce_scalar(tp_part, dist::ReduceOp::sum) : tp_part;
  s += par_.ep_size > 1 ? par_.ep->all_reduce_scalar(ep_part, dist::ReduceOp::sum) : ep_part;
  if (par_.pipelined()) s = par_.pp->all_reduce_scalar(s, dist::ReduceOp::sum);
  return s;
}

}  // namespace trident::train::detail
