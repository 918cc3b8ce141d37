#include "trident/models/causal_lm.h"

#include <cmath>

#include "trident/autograd/autograd.h"
#include "trident/parallel/tensor/cross_entropy.h"

namespace trident::models {

namespace ag = trident::autograd;
using nn::Arch;

std::int64_t default_d_ff(Arch arch, std::int64_t d_model) {
  if (arch == Arch::gpt2) return 4 * d_model;
  const std::int64_t f = (8 * d_model + 2) / 3;
  return (f + 255) / 256 * 256;
}

TransformerSpec preset(const std::string& name) {
  auto gpt2 = [](std::int64_t L, std::int64_t H, std::int64_t D) {
    TransformerSpec s;
    s.arch = Arch::gpt2;
    s.n_layer = L;
    s.n_head = s.n_kv_head = H;
    s.d_model = D;
    s.d_ff = 4 * D;
    s.vocab_size = 50257;
    s.max_seq_len = 1024;
    s.norm_eps = 1e-5;
    s.tie_embeddings = true;
    return s;
  };
  auto llama = [](std::int64_t L, std::int64_t H, std::int64_t Hkv, std::int64_t D, std::int64_t F) {
    TransformerSpec s;
    s.arch = Arch::llama;
    s.n_layer = L;
    s.n_head = H;
    s.n_kv_head = Hkv;
    s.d_model = D;
    s.d_ff = F;
    s.vocab_size = 32000;
    s.max_seq_len = 2048;
    s.norm_eps = 1e-6;
    s.rope.theta = 10000.0;
    s.tie_embeddings = false;
    return s;
  };
  if (name == "gpt2") return gpt2(12, 12, 768);
  if (name == "gpt2-medium") return gpt2(24, 16, 1024);
  if (name == "gpt2-large") return gpt2(36, 20, 1280);
  if (name == "gpt2-xl") return gpt2(48, 25, 1600);
  if (name == "gpt2-tiny") {
    TransformerSpec s = gpt2(2, 4, 64);
    s.vocab_size = 512;
    s.max_seq_len = 128;
    return s;
  }
  if (name == "gpt2-small-corpus") {  // the README's main job on the built-in corpus
    TransformerSpec s = gpt2(4, 4, 256);
    s.vocab_size = 4096;
    s.max_seq_len = 256;
    return s;
  }
  if (name == "llama-tiny") {
    TransformerSpec s = llama(2, 4, 2, 64, 192);
    s.vocab_size = 512;
    s.max_seq_len = 128;
    return s;
  }
  if (name == "llama-small") return llama(8, 8, 4, 512, 1536);
  if (name == "llama2-7b") return llama(32, 32, 32, 4096, 11008);
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  TRIDENT_FAIL("model.preset: unknown preset '{}' (known: {})", name, known);
}

std::vector<std::string> preset_names() {
  return {"gpt2",       "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt2-tiny", "gpt2-small-corpus",
          "llama-tiny", "llama-small", "llama2-7b"};
}

std::vector<StageRange> partition_layers(std::int64_t n_layer, int stages, const std::vector<std::int64_t>& counts) {
  TRIDENT_CHECK(stages >= 1, "pipeline: {} stages", stages);
  std::vector<std::int64_t> per_stage = counts;
  // Every stage needs a layer: with fewer layers than stages no split exists to suggest.
  TRIDENT_CHECK(n_layer >= stages,
                "pipeline: {} layers cannot fill {} pipeline stages (each stage needs at least one layer): use at most "
                "{} stages (dist.pipeline_parallel_size × dist.virtual_pipeline_size)",
                n_layer, stages, n_layer);
  if (per_stage.empty()) {
    TRIDENT_CHECK(n_layer % stages == 0,
                  "pipeline: {} layers do not divide evenly over {} pipeline stages; give the layers of each stage in "
                  "dist.pipeline_num_layers (e.g. [{}])",
                  n_layer, stages, [&] {
                    std::string e;
                    for (int s = 0; s < stages; ++s)
                      e += fmt::format("{}{}", s ? ", " : "", n_layer / stages + (s < n_layer % stages ? 1 : 0));
                    return e;
                  }());
    per_stage.assign(static_cast<std::size_t>(stages), n_layer / stages);
  }
  TRIDENT_CHECK(static_cast<int>(per_stage.size()) == stages,
                "dist.pipeline_num_layers has {} entries for {} pipeline stages", per_stage.size(), stages);
  std::int64_t total = 0;
  for (std::int64_t c : per_stage) {
    TRIDENT_CHECK(c >= 1, "dist.pipeline_num_layers: every stage needs at least one layer, got {}", c);
    total += c;
  }
  TRIDENT_CHECK(total == n_layer, "dist.pipeline_num_layers sums to {} but the model has n_layer={}", total, n_layer);
  std::vector<StageRange> out;
  std::int64_t at = 0;
  for (int s = 0; s < stages; ++s) {
    const std::int64_t n = per_stage[static_cast<std::size_t>(s)];
    out.push_back(StageRange{at, at + n, s == 0, s == stages - 1});
    at += n;
  }
  return out;
}

CausalLM::CausalLM(const TransformerSpec& spec, const nn::TensorParallel& tp, StageRange stage)
    : nn::Module(""), spec_(spec), tp_(tp), stage_(stage) {
  spec_.validate();
  spec_.validate_tensor_parallel(tp.size());
  if (stage_.last_layer < 0) stage_.last_layer = spec.n_layer;
  TRIDENT_CHECK(0 <= stage_.first_layer && stage_.first_layer <= stage_.last_layer && stage_.last_layer <= spec.n_layer,
                "CausalLM: stage layers [{}, {}) outside the model's {} layers", stage_.first_layer, stage_.last_layer,
                spec.n_layer);
  const bool gpt2 = spec.arch == Arch::gpt2;
  const std::string root = gpt2 ? "transformer" : "model";
  // The last stage of a tied model holds a copy of the token embedding as its LM head.
  if (stage_.embed || (stage_.head && spec.tie_embeddings)) {
    wte_ = &add_module(std::make_unique<nn::Embedding>(root + (gpt2 ? ".wte" : ".embed_tokens"), spec.vocab_size,
                                                       spec.d_model, spec.init_std, tp, true));
    if (!stage_.embed) wte_->weight().tied_copy = true;
  }
  if (gpt2 && stage_.embed) {
    wpe_ = &add_module(
        std::make_unique<nn::Embedding>(root + ".wpe", spec.max_seq_len, spec.d_model, spec.init_std, tp, false));
  }
  for (std::int64_t i = stage_.first_layer; i < stage_.last_layer; ++i) {
    const std::string p = fmt::format("{}.{}.{}", root, gpt2 ? "h" : "layers", i);
    blocks_.push_back(&add_module(std::make_unique<nn::TransformerBlock>(p, spec, i, tp)));
  }
  if (!stage_.head) return;
  if (gpt2) {
    final_norm_ = &add_module(std::make_unique<nn::LayerNorm>(root + ".ln_f", spec.d_model, spec.norm_eps, true, tp));
  } else {
    final_norm_ = &add_module(std::make_unique<nn::RMSNorm>(root + ".norm", spec.d_model, spec.norm_eps, tp));
  }
  if (!spec.tie_embeddings) {
    const Shape w{spec.vocab_size, spec.d_model};
    const nn::Init init{nn::InitKind::normal, spec.init_std};
    lm_head_ = tp.active()
                   ? &add_parameter("lm_head.weight", w,
                                    nn::ShardSpec::padded_rows(w, nn::padded_vocab_size(spec.vocab_size, tp.size()),
                                                               tp.rank(), tp.size()),
                                    init, true)
                   : &add_parameter("lm_head.weight", w, init, true);
  }
}

std::int64_t CausalLM::vocab_begin() const noexcept {
  return nn::padded_vocab_size(spec_.vocab_size, tp_.size()) / tp_.size() * tp_.rank();
}

Variable CausalLM::run_unit(std::vector<nn::Parameter*> params, const std::vector<Variable>& inputs, bool recompute,
                            const ForwardContext& ctx,
                            const std::function<Variable(const std::vector<Variable>&)>& fn) const {
  nn::ParameterGatherer* gatherer = ctx.gatherer;
  if ((recompute || gatherer) && ctx.training && autograd::grad_enabled()) {
    autograd::SegmentHooks hooks;
    if (gatherer) {
      hooks.enter = [gatherer, params] { gatherer->gather(params); };
      hooks.exit = [gatherer, params] { gatherer->release(params); };
    }
    return autograd::checkpoint([fn](const std::vector<Variable>& in) { return std::vector<Variable>{fn(in)}; }, inputs,
                                hooks)[0];
  }
  nn::GatheredScope scope(gatherer, std::move(params));
  return fn(inputs);
}

std::vector<nn::Parameter*> CausalLM::embed_parameters() const {
  std::vector<nn::Parameter*> out = wte_->parameters();
  if (wpe_) {
    auto p = wpe_->parameters();
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

std::vector<nn::Parameter*> CausalLM::block_parameters(std::int64_t i) const {
  TRIDENT_CHECK(i >= stage_.first_layer && i < stage_.last_layer, "CausalLM: layer {} is not in this stage [{}, {})", i,
                stage_.first_layer, stage_.last_layer);
  return blocks_[static_cast<std::size_t>(i - stage_.first_layer)]->parameters();
}

std::vector<nn::Parameter*> CausalLM::head_parameters() const {
  std::vector<nn::Parameter*> out = final_norm_->parameters();
  out.push_back(lm_head_ ? lm_head_ : &wte_->weight());
  return out;
}

Variable CausalLM::embed(const Tensor& ids, const ForwardContext& ctx) const {
  TRIDENT_CHECK(stage_.embed, "CausalLM: this pipeline stage has no embeddings");
  return run_unit(embed_parameters(), {}, false, ctx,
                  [this, ids, ctx](const std::vector<Variable>&) { return embed_impl(ids, ctx); });
}

Variable CausalLM::embed_impl(const Tensor& ids, const ForwardContext& ctx) const {
  TRIDENT_CHECK(ids.rank() == 2, "CausalLM: token ids must be [batch, seq], got {}", ids.shape());
  const std::int64_t T_full = ids.shape()[1];
  TRIDENT_CHECK(ctx.position_offset + T_full <= spec_.max_seq_len, "CausalLM: positions up to {} exceed max_seq_len {}",
                ctx.position_offset + T_full, spec_.max_seq_len);
  TRIDENT_CHECK(!tp_.sequence_split() || T_full % tp_.size() == 0,
                "sequence parallelism: the sequence length {} does not divide by tensor_parallel_size={}", T_full,
                tp_.size());
  Variable h = wte_->forward(ids, ctx);  // [B, T/t, D] under sequence parallelism
  const std::int64_t T = h.shape()[1];
  const ForwardContext sctx = nn::sequence_context(ctx, tp_, T);
  if (wpe_) {
    std::vector<std::int64_t> pos(static_cast<std::size_t>(T));
    for (std::int64_t t = 0; t < T; ++t) pos[static_cast<std::size_t>(t)] = ctx.position_offset + sctx.seq_offset + t;
    Variable p = wpe_->forward(Tensor::from_vector(pos, {T}).to(ids.device()), sctx);  // [T, D]
    const std::int64_t B = ids.shape()[0];
    // Broadcast positions over the batch: add to each sample through a [B·T, D] bias-free view.
    h = ag::reshape(h, {B, T * spec_.d_model});
    h = ag::bias_add(h, ag::reshape(p, {T * spec_.d_model}));
    h = ag::reshape(h, {B, T, spec_.d_model});
  }
  return nn::dropout(h, spec_.dropout, wpe_ ? "transformer.drop" : "model.drop", sctx);
}

Variable CausalLM::block(std::int64_t i, const Variable& h, const ForwardContext& ctx) const {
  TRIDENT_CHECK(i >= stage_.first_layer && i < stage_.last_layer, "CausalLM: layer {} is not in this stage [{}, {})", i,
                stage_.first_layer, stage_.last_layer);
  const nn::TransformerBlock* b = blocks_[static_cast<std::size_t>(i - stage_.first_layer)];
  const ForwardContext sctx = nn::sequence_context(ctx, tp_, h.shape()[1]);
  return run_unit(block_parameters(i), {h}, checkpointing_, sctx,
                  [b, sctx](const std::vector<Variable>& in) { return b->forward(in[0], sctx); });
}

Variable CausalLM::head_local(const Variable& h, const ForwardContext& ctx) const {
  TRIDENT_CHECK(stage_.head, "CausalLM: this pipeline stage has no LM head");
  const ForwardContext sctx = nn::sequence_context(ctx, tp_, h.shape()[1]);
  return run_unit(head_parameters(), {h}, false, sctx,
                  [this, sctx](const std::vector<Variable>& in) { return head_impl(in[0], sctx); });
}

Variable CausalLM::head(const Variable& h, const ForwardContext& ctx) const {
  Variable logits = head_local(h, ctx);
  if (!tp_.active()) return logits;
  return ag::slice(parallel::gather_from_tp(logits, tp_.group), -1, 0, spec_.vocab_size);
}

Variable CausalLM::head_impl(const Variable& h, const ForwardContext& ctx) const {
  Variable x = spec_.arch == Arch::gpt2 ? static_cast<const nn::LayerNorm*>(final_norm_)->forward(h, ctx)
                                        : static_cast<const nn::RMSNorm*>(final_norm_)->forward(h, ctx);
  const nn::Parameter& w = lm_head_ ? *lm_head_ : wte_->weight();
  // The LM head is column-parallel over the vocabulary.
  return ag::linear(nn::enter_tp_region(x, tp_), nn::compute_view(w, ctx), Variable());
}

Variable CausalLM::stage_forward(const Tensor& ids, const Variable& input, const ForwardContext& ctx) const {
  Variable h = stage_.embed ? embed(ids, ctx) : input;
  TRIDENT_CHECK(h.defined(), "CausalLM: a stage without the embeddings needs the previous stage's hidden state");
  for (std::int64_t i = stage_.first_layer; i < stage_.last_layer; ++i) h = block(i, h, ctx);
  return h;
}

Variable CausalLM::hidden(const Tensor& ids, const ForwardContext& ctx) const {
  TRIDENT_CHECK(is_whole(), "CausalLM: the whole-model forward needs every layer (this is a pipeline stage)");
  return stage_forward(ids, Variable(), ctx);
}

Variable CausalLM::forward(const Tensor& ids, const ForwardContext& ctx) const {
  return head(hidden(ids, ctx), ctx);
}

Variable CausalLM::logits_loss(const Variable& local_logits, const Tensor& labels, double normalizer) const {
  const std::int64_t rows = labels.numel();
  const std::int64_t width = local_logits.shape().last();
  Variable flat = ag::reshape(local_logits, {rows, width});
  if (tp_.active()) {
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

Variable CausalLM::loss(const Tensor& ids, const Tensor& labels, const ForwardContext& ctx, double normalizer) const {
  TRIDENT_CHECK(labels.shape() == ids.shape(), "CausalLM::loss: labels {} do not match ids {}", labels.shape(),
                ids.shape());
  return logits_loss(head_local(hidden(ids, ctx), ctx), labels, normalizer);
}

double CausalLM::flops_per_token(std::int64_t seq_len) const {
  // N counts every parameter of the whole model, position embeddings included (as Megatron and llm.c do).
  return 6.0 * static_cast<double>(spec_.num_parameters()) +
         12.0 * static_cast<double>(spec_.n_layer * spec_.d_model * seq_len);
}

}  // namespace trident::models
