#include "trident/models/transformer_lm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "trident/autograd/autograd.h"
#include "trident/ops/shape.h"
#include "trident/parallel/tensor/cross_entropy.h"

namespace trident::models {

namespace ag = trident::autograd;

TransformerLM::TransformerLM(const TransformerSpec& spec, const ModelParallel& parallel, StageRange stage)
    : nn::Module(""), spec_(spec), family_(&models::family(spec.family)), tp_(parallel.tp), cp_(parallel.cp),
      stage_(stage) {
  const nn::TensorParallel& tp = parallel.tp;
  spec_.validate();
  spec_.validate_tensor_parallel(tp.size());
  spec_.validate_context_parallel(cp_.size(), tp.size(), cp_.all_to_all);
  if (stage_.last_layer < 0) stage_.last_layer = spec.n_layer;
  TRIDENT_CHECK(0 <= stage_.first_layer && stage_.first_layer <= stage_.last_layer && stage_.last_layer <= spec.n_layer,
                "TransformerLM: stage layers [{}, {}) outside the model's {} layers", stage_.first_layer, stage_.last_layer,
                spec.n_layer);
  const PartNames& names = family_->names;
  padded_vocab_ = nn::padded_vocab_size(spec.vocab_size, tp.size(), spec.vocab_divisible_by);
  vocab_split_ = tp.active() || padded_vocab_ != spec.vocab_size;
  // The last stage of a tied model holds a copy of the token embedding as its LM head.
  if (stage_.embed || (stage_.head && spec.tie_embeddings)) {
    wte_ = &add_module(std::make_unique<nn::Embedding>(names.token_embedding, spec.vocab_size, spec.d_model,
                                                       spec.init_std, tp, true, spec.vocab_divisible_by));
    if (!stage_.embed) wte_->weight().tied_copy = true;
  }
  if (!names.position_embedding.empty() && stage_.embed) {
    wpe_ = &add_module(std::make_unique<nn::Embedding>(names.position_embedding, spec.max_seq_len, spec.d_model,
                                                       spec.init_std, tp, false));
  }
  if (!names.token_type_embedding.empty() && spec.type_vocab_size > 0 && stage_.embed) {
    wtte_ = &add_module(std::make_unique<nn::Embedding>(names.token_type_embedding, spec.type_vocab_size, spec.d_model,
                                                        spec.init_std, tp, false));
  }
  if (!names.embed_norm.empty() && stage_.embed) embed_norm_ = &add_module(family_->make_norm(names.embed_norm, spec_, tp));
  for (std::int64_t i = stage_.first_layer; i < stage_.last_layer; ++i) {
    blocks_.push_back(&add_module(family_->make_block(fmt::format("{}.{}", names.layers, i), spec_, i, parallel)));
  }
  if (!stage_.head) return;
  if (!names.final_norm.empty()) final_norm_ = &add_module(family_->make_norm(names.final_norm, spec_, tp));
  if (spec.pooler && !names.pooler.empty()) pooler_ = &add_module(family_->make_pooler(names.pooler, spec_, tp));
  if (!names.head_transform.empty()) {
    head_transform_ = &add_module(family_->make_head_transform(names.head_transform, spec_, tp));
  }
  // Vocabulary-sized head parameters are column-parallel over the padded vocabulary.
  auto vocab_parameter = [&](const std::string& name, const Shape& shape, const nn::Init& init, bool decay) {
    return vocab_split_ ? &add_parameter(name, shape,
                                         nn::ShardSpec::padded_rows(shape, padded_vocab_, tp.rank(), tp.size()), init,
                                         decay)
                        : &add_parameter(name, shape, init, decay);
  };
  if (!spec.tie_embeddings) {
    lm_head_ = vocab_parameter(names.lm_head + ".weight", Shape{spec.vocab_size, spec.d_model},
                               nn::Init{nn::InitKind::normal, spec.init_std}, true);
  }
  if (!names.head_bias.empty()) {
    head_bias_ = vocab_parameter(names.head_bias, Shape{spec.vocab_size}, nn::Init{nn::InitKind::zeros, 0}, false);
  }
}

std::int64_t TransformerLM::vocab_begin() const noexcept {
  return padded_vocab_ / tp_.size() * tp_.rank();
}

Variable TransformerLM::run_unit(std::vector<nn::Parameter*> params, const std::vector<Variable>& inputs, bool recompute,
                            const ForwardContext& ctx,
                            const std::function<Variable(const std::vector<Variable>&)>& fn) const {
  return run_unit_outputs(std::move(params), inputs, recompute, ctx,
                          [fn](const std::vector<Variable>& in) { return std::vector<Variable>{fn(in)}; })[0];
}

std::vector<Variable> TransformerLM::run_unit_outputs(
    std::vector<nn::Parameter*> params, const std::vector<Variable>& inputs, bool recompute, const ForwardContext& ctx,
    const std::function<std::vector<Variable>(const std::vector<Variable>&)>& fn) const {
  nn::ParameterGatherer* gatherer = gatherer_;
  if ((recompute || gatherer) && ctx.training && autograd::grad_enabled()) {
    autograd::SegmentHooks hooks;
    if (gatherer) {
      hooks.enter = [gatherer, params] { gatherer->gather(params); };
      hooks.exit = [gatherer, params] { gatherer->release(params); };
    }
    return autograd::checkpoint(fn, inputs, hooks);
  }
  nn::GatheredScope scope(gatherer, std::move(params));
  return fn(inputs);
}

namespace {

void append_parameters(std::vector<nn::Parameter*>& out, nn::Module* m) {
  if (!m) return;
  const auto p = m->parameters();
  out.insert(out.end(), p.begin(), p.end());
}

}  // namespace

std::vector<nn::Parameter*> TransformerLM::embed_parameters() const {
  std::vector<nn::Parameter*> out;
  for (nn::Module* m : std::initializer_list<nn::Module*>{wte_, wpe_, wtte_, embed_norm_}) {
    append_parameters(out, m);
  }
  return out;
}

std::vector<nn::Parameter*> TransformerLM::block_parameters(std::int64_t i) const {
  TRIDENT_CHECK(i >= stage_.first_layer && i < stage_.last_layer, "TransformerLM: layer {} is not in this stage [{}, {})", i,
                stage_.first_layer, stage_.last_layer);
  return blocks_[static_cast<std::size_t>(i - stage_.first_layer)]->parameters();
}

std::vector<nn::Parameter*> TransformerLM::head_parameters() const {
  std::vector<nn::Parameter*> out;
  append_parameters(out, final_norm_);
  append_parameters(out, head_transform_);
  out.push_back(lm_head_ ? lm_head_ : &wte_->weight());
  if (head_bias_) out.push_back(head_bias_);
  return out;
}

Variable TransformerLM::embed(const Tensor& ids, const ForwardContext& ctx) const {
  TRIDENT_CHECK(stage_.embed, "TransformerLM: this pipeline stage has no embeddings");
  return run_unit(embed_parameters(), {}, false, ctx,
                  [this, ids, ctx](const std::vector<Variable>&) { return embed_impl(ids, ctx); });
}

Variable TransformerLM::embed_impl(const Tensor& ids, const ForwardContext& ctx) const {
  TRIDENT_CHECK(ids.rank() == 2, "TransformerLM: token ids must be [batch, seq], got {}", ids.shape());
  const std::int64_t T_full = ids.shape()[1];
  // Under context parallelism the ids are this rank's chunks of sequences of context.seq_len tokens.
  const std::int64_t T_whole = ctx.context.active() ? ctx.context.seq_len : T_full;
  TRIDENT_CHECK(!ctx.context.active() || T_full == ctx.context.local_len(),
                "TransformerLM: {} token ids per sample, but context parallelism gives this rank {} of {}", T_full,
                ctx.context.local_len(), T_whole);
  TRIDENT_CHECK(ctx.position_offset + T_whole <= spec_.max_seq_len, "TransformerLM: positions up to {} exceed max_seq_len {}",
                ctx.position_offset + T_whole, spec_.max_seq_len);
  TRIDENT_CHECK(!tp_.sequence_split() || T_full % tp_.size() == 0,
                "sequence parallelism: the sequence length {} does not divide by tensor_parallel_size={}", T_full,
                tp_.size());
  Variable h = wte_->forward(ids, ctx);  // [B, T/t, D] under sequence parallelism
  const std::int64_t T = h.shape()[1];
  const ForwardContext sctx = nn::sequence_context(ctx, tp_, T);
  if (const Tensor positions = nn::document_positions(ctx, sctx.seq_offset, T); wpe_ && positions.defined()) {
    // Each sample's own positions, restarting at each document: [B, T, D] added as it is.
    h = ag::add(h, wpe_->forward(positions.to(ids.device()), sctx));
  } else if (wpe_) {
    Variable p = wpe_->forward(ctx.global_positions(sctx.seq_offset, T).to(ids.device()), sctx);  // [T, D]
    const std::int64_t B = ids.shape()[0];
    // Broadcast positions over the batch: add to each sample through a [B·T, D] bias-free view.
    h = ag::reshape(h, {B, T * spec_.d_model});
    h = ag::bias_add(h, ag::reshape(p, {T * spec_.d_model}));
    h = ag::reshape(h, {B, T, spec_.d_model});
  }
  if (wtte_) {
    // This rank's share of the sequence's token types (all type 0 when none are given).
    const std::int64_t B = ids.shape()[0];
    Tensor types = Tensor::zeros({B, T}, DType::i64);
    if (ctx.token_types.defined()) {
      TRIDENT_CHECK(ctx.token_types.shape() == Shape({ids.shape()[0], T_whole}),
                    "TransformerLM: token types {} do not match the ids' batch [{}, {}]", ctx.token_types.shape(),
                    ids.shape()[0], T_whole);
      const Tensor local = ctx.context.take(ctx.token_types.to(Device::cpu()).to(DType::i64), 1);
      types = ops::slice(local, 1, sctx.seq_offset, sctx.seq_offset + T);
    }
    h = ag::add(h, wtte_->forward(types.to(ids.device()), sctx));
  }
  if (embed_norm_) h = embed_norm_->forward(h, sctx);
  return nn::dropout(h, spec_.dropout, family_->names.embed_dropout, sctx);
}

Variable TransformerLM::block(std::int64_t i, const Variable& h, const ForwardContext& ctx) const {
  TRIDENT_CHECK(i >= stage_.first_layer && i < stage_.last_layer, "TransformerLM: layer {} is not in this stage [{}, {})", i,
                stage_.first_layer, stage_.last_layer);
  const nn::Layer* b = blocks_[static_cast<std::size_t>(i - stage_.first_layer)];
  const ForwardContext sctx = nn::sequence_context(ctx, tp_, h.shape()[1]);
  if (sctx.aux == nullptr) {
    return run_unit(block_parameters(i), {h}, checkpointing_, sctx,
                    [b, sctx](const std::vector<Variable>& in) { return b->forward(in[0], sctx); });
  }
  // The block's MoE auxiliary losses leave the unit as a second output, so that a unit recomputed in
  // backward (activation checkpointing, ZeRO-3's gathering) backpropagates them too. The recomputation
  // gets a sink of its own: the caller's may be gone by then, and its statistics are the first pass's.
  nn::AuxLosses* sink = sctx.aux;
  ForwardContext inner = sctx;
  inner.aux = nullptr;
  auto first_pass = std::make_shared<bool>(true);
  const std::vector<Variable> out = run_unit_outputs(
      block_parameters(i), {h}, checkpointing_, inner, [b, inner, sink, first_pass](const std::vector<Variable>& in) {
        nn::AuxLosses unit;
        ForwardContext c = inner;
        c.aux = &unit;
        std::vector<Variable> result{b->forward(in[0], c)};
        if (*first_pass) sink->stats.insert(sink->stats.end(), unit.stats.begin(), unit.stats.end());
        Variable total = unit.total();
        if (total.defined()) result.push_back(total);
        return result;
      });
  *first_pass = false;
  if (out.size() > 1) sink->losses.push_back(out[1]);
  return out[0];
}

Variable TransformerLM::head_local(const Variable& h, const ForwardContext& ctx) const {
  TRIDENT_CHECK(stage_.head, "TransformerLM: this pipeline stage has no LM head");
  const ForwardContext sctx = nn::sequence_context(ctx, tp_, h.shape()[1]);
  return run_unit(head_parameters(), {h}, false, sctx,
                  [this, sctx](const std::vector<Variable>& in) { return head_impl(in[0], sctx); });
}

Variable TransformerLM::pooled(const Variable& h, const ForwardContext& ctx) const {
  TRIDENT_CHECK(pooler_, "TransformerLM: this {} has no pooler (model.pooler = true builds one)", family_->display_name);
  TRIDENT_CHECK(!tp_.sequence_split() && !ctx.context.active(),
                "TransformerLM: the pooled output needs the whole sequence (no sequence or context parallelism)");
  return pooler_->forward(h, ctx);
}

Variable TransformerLM::head(const Variable& h, const ForwardContext& ctx) const {
  Variable logits = head_local(h, ctx);
  if (tp_.active()) logits = parallel::gather_from_tp(logits, tp_.group);
  return vocab_split_ ? ag::slice(logits, -1, 0, spec_.vocab_size) : logits;
}

Variable TransformerLM::head_impl(const Variable& h, const ForwardContext& ctx) const {
  Variable x = final_norm_ ? final_norm_->forward(h, ctx) : h;
  if (head_transform_) x = head_transform_->forward(x, ctx);
  const nn::Parameter& w = lm_head_ ? *lm_head_ : wte_->weight();
  // The LM head is column-parallel over the vocabulary.
  return ag::linear(nn::enter_tp_region(x, tp_), nn::compute_view(w, ctx),
                    head_bias_ ? nn::compute_view(*head_bias_, ctx) : Variable());
}

Variable TransformerLM::stage_forward(const Tensor& ids, const Variable& input, const ForwardContext& ctx) const {
  Variable h = stage_.embed ? embed(ids, ctx) : input;
  TRIDENT_CHECK(h.defined(), "TransformerLM: a stage without the embeddings needs the previous stage's hidden state");
  for (std::int64_t i = stage_.first_layer; i < stage_.last_layer; ++i) h = block(i, h, ctx);
  return h;
}

Variable TransformerLM::hidden(const Tensor& ids, const ForwardContext& ctx) const {
  TRIDENT_CHECK(is_whole(), "TransformerLM: the whole-model forward needs every layer (this is a pipeline stage)");
  return stage_forward(ids, Variable(), ctx);
}

Variable TransformerLM::forward(const Tensor& ids, const ForwardContext& ctx) const {
  return head(hidden(ids, ctx), ctx);
}

Variable TransformerLM::logits_loss(const Variable& local_logits, const Tensor& labels, double normalizer) const {
  const std::int64_t rows = labels.numel();
  const std::int64_t width = local_logits.shape().last();
  Variable flat = ag::reshape(local_logits, {rows, width});
  if (vocab_split_) {
    return parallel::vocab_parallel_cross_entropy(flat, labels.view({rows}), vocab_begin(), spec_.vocab_size, tp_.group,
                                                  -100, normalizer);
  }
  ag::CrossEntropyOptions opts;
  if (normalizer > 0) {
    opts.reduction = ag::Reduction::sum;
    opts.normalizer = normalizer;
  }
  return ag::cross_entropy(flat, labels.view({rows}), opts);
}

void TransformerLM::count_predictions(const Tensor& local_logits, const Tensor& labels,
                                     nn::PredictionCounts& counts) const {
  const std::int64_t rows = labels.numel(), width = local_logits.shape().last();
  const std::vector<float> logits = local_logits.to_vector<float>();
  const std::vector<std::int64_t> label = labels.to_vector<std::int64_t>();
  // This rank's real columns: global ids [begin, begin + real).
  const std::int64_t begin = vocab_split_ ? vocab_begin() : 0;
  const std::int64_t real = std::clamp<std::int64_t>(spec_.vocab_size - begin, 0, width);
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::vector<double> best(static_cast<std::size_t>(rows), -kNone), where(static_cast<std::size_t>(rows), kNone);
  for (std::int64_t r = 0; r < rows; ++r) {
    if (label[static_cast<std::size_t>(r)] < 0) continue;
    const float* row = logits.data() + r * width;
    for (std::int64_t v = 0; v < real; ++v) {
      if (row[v] > best[static_cast<std::size_t>(r)]) {
        best[static_cast<std::size_t>(r)] = row[v];
        where[static_cast<std::size_t>(r)] = static_cast<double>(begin + v);
      }
    }
  }
  if (tp_.active()) {
    Tensor maxima = Tensor::from_vector(best, Shape{rows});
    tp_.group->all_reduce_sync(maxima, {.op = dist::ReduceOp::max});
    const std::vector<double> global = maxima.to_vector<double>();
    for (std::size_t r = 0; r < best.size(); ++r)
      if (best[r] != global[r]) where[r] = kNone;
    Tensor ids = Tensor::from_vector(where, Shape{rows});
    tp_.group->all_reduce_sync(ids, {.op = dist::ReduceOp::min});
    where = ids.to_vector<double>();
  }
  for (std::size_t r = 0; r < label.size(); ++r) {
    if (label[r] < 0) continue;
    ++counts.labelled;
    if (where[r] == static_cast<double>(label[r])) ++counts.correct;
  }
}

Variable TransformerLM::loss(const Tensor& ids, const Tensor& labels, const ForwardContext& ctx, double normalizer) const {
  TRIDENT_CHECK(labels.shape() == ids.shape(), "TransformerLM::loss: labels {} do not match ids {}", labels.shape(),
                ids.shape());
  if (ctx.predictions != nullptr) {
    const Variable logits = head_local(hidden(ids, ctx), ctx);
    count_predictions(logits.data(), labels, *ctx.predictions);
    return logits_loss(logits, labels, normalizer);
  }
  if (!family_->moe || !ctx.training) return logits_loss(head_local(hidden(ids, ctx), ctx), labels, normalizer);
  // Training a mixture of experts: the objective has the layers' auxiliary losses too (evaluation, with
  // ctx.training off, reports the language-model loss alone). Mixture-of-experts layers append their auxiliary losses to ctx.aux (a local sink when the caller
  // gives none). Each is a mean over this forward's tokens; with a normalizer (the micro-batch's loss is
  // its share of the global batch's) it is weighted by the micro-batch's share of the tokens, so the
  // accumulated total is the token-weighted mean over micro-batches.
  nn::AuxLosses local;
  ForwardContext c = ctx;
  if (c.aux == nullptr) c.aux = &local;
  const std::size_t first = c.aux->losses.size();
  Variable total = logits_loss(head_local(hidden(ids, c), c), labels, normalizer);
  // The micro-batch's share of the global batch's tokens: under context parallelism the labels are this
  // rank's chunks, and the micro-batch holds context.size times as many.
  const double weight = normalizer > 0 ? static_cast<double>(labels.numel() * ctx.context.size) / normalizer : 1.0;
  Variable aux;
  for (std::size_t i = first; i < c.aux->losses.size(); ++i) aux = aux.defined() ? ag::add(aux, c.aux->losses[i]) : c.aux->losses[i];
  if (!aux.defined()) return total;
  if (weight != 1.0) aux = ag::scale(aux, weight);
  c.aux->weighted_value += aux.data().item();
  return ag::add(total, aux);
}

double TransformerLM::flops_per_token(std::int64_t seq_len) const {
  // N counts every parameter a token passes through, position embeddings included (as Megatron and llm.c
  // do); of a mixture of experts only the chosen ones.
  return 6.0 * static_cast<double>(spec_.active_parameters()) +
         12.0 * static_cast<double>(spec_.n_layer * spec_.d_model * seq_len);
}

}  // namespace trident::models
