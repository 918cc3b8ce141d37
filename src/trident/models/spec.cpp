#include "trident/models/spec.h"

#include <algorithm>
#include <cmath>

#include "trident/core/error.h"
#include "trident/models/family.h"

namespace trident::models {

std::int64_t TransformerSpec::num_parameters() const { return static_cast<std::int64_t>(parameter_count(*this)); }

std::int64_t TransformerSpec::active_parameters() const {
  // nn::MoE's experts are SwiGLU MLPs of 3·d_model·d_ff parameters.
  const long double idle = n_experts > 0 ? static_cast<long double>(n_layer) *
                                               static_cast<long double>(n_experts - experts_per_token) * 3 *
                                               static_cast<long double>(d_model) *
                                               static_cast<long double>(expert_d_ff())
                                         : 0;
  return static_cast<std::int64_t>(parameter_count(*this) - idle);
}

long double parameter_count(const TransformerSpec& s) {
  const Family& f = family(s.family);
  const long double D = static_cast<long double>(s.d_model), V = static_cast<long double>(s.vocab_size);
  const long double positions = f.names.position_embedding.empty() ? 0 : static_cast<long double>(s.max_seq_len) * D;
  return V * D * (s.tie_embeddings ? 1 : 2) + positions +
         static_cast<long double>(s.n_layer) * f.block_parameters(s) + f.other_parameters(s);
}

void TransformerSpec::validate() const {
  const Family& f = models::family(family);
  TRIDENT_CHECK(n_layer > 0 && n_head > 0 && d_model > 0 && vocab_size > 0 && max_seq_len > 0,
                "model: n_layer, n_head, d_model, vocab_size and max_seq_len must be positive (got {}, {}, {}, {}, {})",
                n_layer, n_head, d_model, vocab_size, max_seq_len);
  TRIDENT_CHECK(d_model % n_head == 0, "model: d_model={} is not divisible by n_head={}", d_model, n_head);
  TRIDENT_CHECK(n_kv_head > 0 && n_head % n_kv_head == 0, "model: n_head={} is not a multiple of n_kv_head={}", n_head,
                n_kv_head);
  TRIDENT_CHECK(d_ff > 0, "model: d_ff must be positive, got {}", d_ff);
  TRIDENT_CHECK(dropout >= 0.0 && dropout < 1.0, "model: dropout must be in [0, 1), got {}", dropout);
  TRIDENT_CHECK(attention_dropout >= 0.0 && attention_dropout < 1.0,
                "model.attention_dropout must be in [0, 1), got {}", attention_dropout);
  TRIDENT_CHECK(std::isfinite(norm_eps) && norm_eps >= 0, "model.norm_eps must be a finite number >= 0, got {}",
                norm_eps);
  TRIDENT_CHECK(std::isfinite(rope.theta) && rope.theta > 0, "model.rope_theta must be a positive finite number, got {}",
                rope.theta);
  TRIDENT_CHECK(vocab_divisible_by >= 1, "model.make_vocab_size_divisible_by must be at least 1, got {}",
                vocab_divisible_by);
  TRIDENT_CHECK(type_vocab_size >= 0, "model.type_vocab_size must be 0 (none) or positive, got {}", type_vocab_size);
  TRIDENT_CHECK(type_vocab_size == 0 || !f.names.token_type_embedding.empty(),
                "model.type_vocab_size={}: {} has no token-type embeddings (it must be 0)", type_vocab_size,
                f.display_name);
  TRIDENT_CHECK(!pooler || !f.names.pooler.empty(), "model.pooler: {} has no pooler", f.display_name);
  TRIDENT_CHECK(n_experts == 0 || f.moe, "model.n_experts={}: {} has no mixture-of-experts layers (it must be 0; "
                "model.arch=mixtral has)", n_experts, f.display_name);
  if (f.moe) {
    TRIDENT_CHECK(n_experts >= 1, "model.n_experts must be positive for {}, got {}", f.display_name, n_experts);
    TRIDENT_CHECK(experts_per_token >= 1 && experts_per_token <= n_experts,
                  "model.experts_per_token={} must be in [1, n_experts={}]", experts_per_token, n_experts);
    TRIDENT_CHECK(moe_d_ff >= 0 && moe_shared_d_ff >= 0, "model.moe_d_ff={} and moe_shared_d_ff={} must be >= 0",
                  moe_d_ff, moe_shared_d_ff);
    TRIDENT_CHECK(moe_aux_loss_coef >= 0 && moe_z_loss_coef >= 0 && moe_capacity_factor >= 0,
                  "model.moe_aux_loss_coef, moe_z_loss_coef and moe_capacity_factor must be >= 0 (got {}, {}, {})",
                  moe_aux_loss_coef, moe_z_loss_coef, moe_capacity_factor);
  }
  if (f.validate) f.validate(*this);
  if (sparse_attention.active()) {
    validate_sparse_attention(sparse_attention, n_head, max_seq_len);
    TRIDENT_CHECK(sliding_window == 0, "model.sparse_attention with model.sliding_window={}: the layout is the "
                  "attention's pattern; use one or the other", sliding_window);
  }
}

void TransformerSpec::validate_tensor_parallel(int tp) const {
  if (tp <= 1) return;
  TRIDENT_CHECK(n_head % tp == 0, "dist.tensor_parallel_size={} must divide the number of attention heads n_head={}",
                tp, n_head);
  TRIDENT_CHECK(n_kv_head % tp == 0,
                "dist.tensor_parallel_size={} must divide the number of key/value heads n_kv_head={} (each rank "
                "holds whole query groups)",
                tp, n_kv_head);
  TRIDENT_CHECK(d_ff % tp == 0, "dist.tensor_parallel_size={} must divide the MLP width d_ff={}", tp, d_ff);
}

void TransformerSpec::validate_context_parallel(int cp, int tp, bool all_to_all) const {
  if (cp <= 1) return;
  tp = std::max(tp, 1);
  TRIDENT_CHECK(!all_to_all || ((n_head / tp) % cp == 0 && (n_kv_head / tp) % cp == 0),
                "dist.context_parallel_algorithm=all_to_all scatters the heads: the {} query heads ({} key/value heads) "
                "per tensor-parallel rank must divide by dist.context_parallel_size={} (or use the ring)",
                n_head / tp, n_kv_head / tp, cp);
  TRIDENT_CHECK(!sparse_attention.active(),
                "model.sparse_attention with dist.context_parallel_size={}: block-sparse attention runs on whole "
                "sequences; use one or the other",
                cp);
  TRIDENT_CHECK(n_experts == 0 || moe_capacity_factor == 0,
                "model.moe_capacity_factor={} with dist.context_parallel_size={}: capacity drops depend on the whole "
                "micro-batch's token order; use dropless routing (model.moe_capacity_factor=0)",
                moe_capacity_factor, cp);
}

void TransformerSpec::validate_expert_parallel(int ep) const {
  if (ep <= 1 || n_experts == 0) return;
  TRIDENT_CHECK(n_experts % ep == 0,
                "dist.expert_parallel_size={} must divide the {} experts of each MoE layer (model.n_experts)", ep,
                n_experts);
}

}  // namespace trident::models
