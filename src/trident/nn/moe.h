// Mixture of experts (issue 23): a router, top-k experts per token, SwiGLU
// experts and an optional shared expert, single process. The layer knows sizes
// and options, never a family; a family chooses the options and every name
// (Mixtral: block_sparse_moe.gate, block_sparse_moe.experts.{e}.w1/w2/w3;
// Qwen2-MoE: mlp.gate, mlp.experts.{e}.gate_proj/up_proj/down_proj,
// mlp.shared_expert.*, mlp.shared_expert_gate).
//
// Forward, for x [B, T, D] flattened to N = B·T tokens:
//   logits = gate(x) [N, E] (no bias), probs = softmax(logits).
//   Each token's top_k experts by probability (ties: the lower expert index),
//   slot 0 the most probable. Weights: norm_topk_prob (Mixtral, Qwen2-MoE's
//   flag on) renormalises the k selected probabilities to sum to 1 (computed as
//   the softmax of the k selected logits, which is the same); off keeps the raw
//   softmax probabilities. Gradients flow through the weights, not the choice.
//   Dispatch: the (token, slot) assignments are sorted by expert (within an
//   expert by slot, then token position), each expert's rows gathered into one
//   block and run as one SwiGLU GEMM chain, and the outputs scattered back
//   weighted. Dropless keeps every assignment. Capacity keeps at most
//   capacity = ceil(capacity_factor · N · top_k / E) assignments per expert and
//   drops the rest: an expert keeps its assignments in the order
//   (slot, token position) — every token's first choice before any second
//   choice, earlier tokens first (GShard/Switch priority) — so what is dropped
//   depends only on the batch. A dropped assignment contributes nothing (the
//   residual carries the token).
//   An expert that receives no assignment in a batch is not run: its parameters
//   get no gradient from it (undefined), which the optimisers take as zero
//   (optim/optimizer.h), so every layout updates it alike.
//   Shared expert (shared_d_ff > 0): a SwiGLU MLP added to every token,
//   multiplied by sigmoid(x · w_shared_gate) when shared_gated (Qwen2-MoE).
//
// Expert parallelism (ExpertParallel, e ranks): rank j holds experts [j·E/e, (j+1)·E/e) of every MoE
// layer, under their global names, and the e ranks each route their own tokens. After routing (which
// is local, so the drops and both losses are exactly the single-process ones for the same micro-batch),
// each rank sends every kept assignment's row to the rank holding its expert (an uneven all-to-all,
// rows in the `order` above), the holder runs each of its experts once on the rows of all senders
// (sender-major within an expert), and a second all-to-all brings the outputs back for the weighted
// combine. Backward runs the two exchanges in reverse. A GEMM's output rows do not depend on the other
// rows, so an expert's rows get the values they would get alone (up to the GEMM's blocking). Both
// exchanges happen on every rank every forward (and backward), even with no rows to send or receive.
//
// Auxiliary losses (appended to ctx.aux when set; the model adds them to its loss):
//   load balancing (Switch/Mixtral): aux_loss_coef · E · Σ_e f_e · P_e, with
//     f_e the fraction of all N·top_k assignments (before capacity dropping)
//     routed to e (a constant) and P_e the mean over tokens of probs[:, e].
//     Hugging Face's load_balancing_loss_func sums f over the k slots, so its
//     value is top_k times this one: a family matching it scales the coefficient.
//   router z-loss (ST-MoE): z_loss_coef · mean_t logsumexp(logits_t)².
// The statistics (tokens per expert, dropped assignments) go to ctx.aux->stats.
// Both losses are per forward call: micro-batches each balance their own tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trident/dist/group.h"
#include "trident/nn/transformer.h"

namespace trident::nn {

enum class MoEDispatch {
  dropless,  // every assignment runs
  capacity,  // at most ceil(capacity_factor · tokens · top_k / n_experts) per expert
};

struct MoEOptions {
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;        // each expert's hidden width
  std::int64_t n_experts = 0;
  std::int64_t top_k = 1;
  bool norm_topk_prob = true;   // renormalise the top-k weights to sum to 1
  MoEDispatch dispatch = MoEDispatch::dropless;
  double capacity_factor = 1.0; // capacity dispatch only
  double aux_loss_coef = 0.0;   // 0: no load-balancing loss
  double z_loss_coef = 0.0;     // 0: no router z-loss
  std::int64_t shared_d_ff = 0; // 0: no shared expert
  bool shared_gated = false;    // the shared expert's output times sigmoid(x · w_shared_gate)
  double init_std = 0.02;
  double out_init_std = 0.02;
  std::int64_t layer = 0;       // the block's index in the model (its per-layer statistics' slot)
  // The sub-layers' names, the family's choice: the router `gate`; expert e is
  // `<experts>.<e>` with `<expert_gate>`, `<expert_up>`, `<expert_down>`; the
  // shared expert `<shared_expert>` with the same three names, and its gate `<shared_expert_gate>`.
  std::string gate = "gate", experts = "experts";
  std::string expert_gate = "gate_proj", expert_up = "up_proj", expert_down = "down_proj";
  std::string shared_expert = "shared_expert", shared_expert_gate = "shared_expert_gate";
};

// The routing of one batch, computed on the host from the router probabilities.
struct MoERouting {
  std::int64_t tokens = 0, n_experts = 0, top_k = 0, capacity = 0;  // capacity 0: dropless
  std::vector<std::int64_t> expert;   // [tokens · top_k]: the expert of (token, slot)
  std::vector<std::int64_t> order;    // kept assignments (t·top_k + slot), grouped by expert in expert order
  std::vector<std::int64_t> counts;   // [n_experts]: kept assignments per expert (the blocks of `order`)
  std::vector<std::int64_t> routed;   // [n_experts]: assignments before dropping
  std::vector<std::int64_t> position; // [tokens · top_k]: the row in `order`, or -1 when dropped
  std::int64_t dropped = 0;
};

// Top-k of each row of probs [tokens · n_experts] (row-major), then the dispatch
// described above. capacity 0 = dropless.
MoERouting route_top_k(const std::vector<double>& probs, std::int64_t tokens, std::int64_t n_experts,
                       std::int64_t top_k, std::int64_t capacity);
// ceil(capacity_factor · tokens · top_k / n_experts), at least 1.
std::int64_t moe_capacity(double capacity_factor, std::int64_t tokens, std::int64_t top_k, std::int64_t n_experts);

// The expert-parallel group of the MoE layers (dist::Mesh's ep groups); null: every expert is local.
using ExpertParallel = dist::Group;

class MoE : public Layer {
 public:
  // Errors name dist.expert_parallel_size when it does not divide n_experts. Under context parallelism
  // (cp: the ranks that hold the other chunks of the same sequences) the auxiliary losses are each rank's
  // share of the whole sequence's: the routed counts are summed over cp, and the means are over its tokens.
  // Capacity dispatch drops by the whole micro-batch's token order, so it is refused under cp.
  MoE(std::string prefix, MoEOptions options, ExpertParallel ep = {}, dist::Group cp = {});
  // x [B, T, D] (or [N, D]) → the same shape, in ctx.compute_dtype (x is cast to it first).
  Variable forward(const Variable& x, const ForwardContext& ctx) const override;

  const MoEOptions& options() const noexcept { return options_; }
  Linear& router() noexcept { return *gate_; }
  // Global expert e (held by this rank: e in [first_expert(), first_expert() + local_experts())).
  FeedForward& expert(std::int64_t e);
  std::int64_t local_experts() const noexcept { return static_cast<std::int64_t>(experts_.size()); }
  std::int64_t first_expert() const noexcept { return local_experts() * ep_.rank(); }

 private:
  // Runs the local experts on `rows` (the kept assignments' rows, grouped by global expert with
  // counts[e] each): directly, or through the expert-parallel exchange.
  Variable run_experts(const Variable& rows, const std::vector<std::int64_t>& counts, const ForwardContext& ctx) const;
  // The local experts on rows grouped by local expert (counts[le] rows each); zero counts are skipped.
  Variable run_local(const Variable& rows, const std::vector<std::int64_t>& counts, const ForwardContext& ctx) const;

  MoEOptions options_;
  ExpertParallel ep_;
  dist::Group cp_;
  Linear* gate_ = nullptr;
  std::vector<FeedForward*> experts_;
  FeedForward* shared_ = nullptr;
  Linear* shared_gate_ = nullptr;
};

}  // namespace trident::nn
