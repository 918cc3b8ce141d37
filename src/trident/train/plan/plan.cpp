#include "trident/train/plan/plan.h"

#include <algorithm>
#include <cmath>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/data/tokenizer/tokenizer.h"
#include "trident/models/family.h"
#include "trident/nn/tensor_parallel.h"
#include "trident/train/device.h"
#include "trident/train/setup.h"
#include "trident/train/trainer.h"

namespace trident::train {

namespace {

using LD = long double;
LD ld(std::int64_t v) {
  return static_cast<LD>(v);
}

LD all_reduce(LD payload, LD g) {
  return g > 1 ? 2 * (g - 1) / g * payload : 0;
}
LD gather(LD payload, LD g) {
  return g > 1 ? (g - 1) / g * payload : 0;
}

// The ranks a group of `size` members `stride` apart spans (tensor parallelism innermost: docs/parallelism.md).
bool within_node(std::int64_t size, std::int64_t stride, const Hardware& h) {
  return size * stride <= h.node_size;
}

}  // namespace

models::TransformerSpec planned_spec(const Config& c) {
  // As training does: the tokenizer's vocabulary unless model.vocab_size (or a pretrained config) sets it.
  std::int64_t vocab = 0;
  if (c.model.vocab_size == 0 && c.model.from_pretrained.empty() && !c.data.tokenizer.empty())
    vocab = data::Tokenizer::load(c.data.tokenizer).vocab_size();
  // (model_spec refuses a vocabulary of 0: neither model.vocab_size nor data.tokenizer.)
  models::TransformerSpec s = detail::model_spec(c.model, vocab, c.train.seq_len);
  TRIDENT_CHECK(c.train.seq_len <= s.max_seq_len, "train.seq_len={} exceeds the model's max_seq_len={}",
                c.train.seq_len, s.max_seq_len);
  return s;
}

long double measured_peak_flops(const Config& c) {
  return static_cast<long double>(detail::matmul_peak_gflops(Device::cpu(), detail::compute_dtype(c.train.precision))) *
         1e9L;
}

Config with_layout(Config c, const MemoryLayout& l) {
  c.dist.data_parallel_size = l.dp;
  c.dist.tensor_parallel_size = l.tp;
  c.dist.pipeline_parallel_size = l.pp;
  c.dist.expert_parallel_size = l.ep;
  c.dist.context_parallel_size = l.cp;
  c.dist.context_parallel_algorithm = l.cp_all_to_all ? "all_to_all" : "ring";
  c.dist.virtual_pipeline_size = l.virtual_stages;
  c.dist.pipeline_schedule = l.schedule;
  c.dist.zero_stage = l.zero_stage;
  c.dist.sequence_parallel = l.sequence_parallel;
  c.train.activation_checkpointing = l.checkpointing;
  return c;
}

long double bubble_fraction(const MemoryLayout& l) {
  if (l.pp <= 1) return 0;
  const LD m = ld(l.accumulation) * (l.schedule == "interleaved" ? ld(l.virtual_stages) : 1);
  return (ld(l.pp) - 1) / (m + ld(l.pp) - 1);
}

std::vector<GroupTraffic> step_traffic(const Config& c, const models::TransformerSpec& s, const MemoryLayout& l) {
  const models::Family& f = models::family(s.family);
  const LD value = parse_precision(c.train.precision, "train.precision") == DType::f32 ? 4 : 2;
  // Each rank's tokens of a micro-batch (its context-parallel chunks), and the ranks that reduce the
  // same gradients (dp × cp).
  const LD cp = ld(l.cp);
  const LD tokens = ld(c.train.micro_batch_size) * ld(c.train.seq_len) / cp, m = ld(l.accumulation);
  const LD D = ld(s.d_model), tp = ld(l.tp), dp = ld(l.dp) * cp, ep = ld(l.ep);
  const MemoryEstimate e = estimate_memory(c, s, l);
  // The largest stage's parameters: the dense part is reduced over dp, the experts over dp / ep.
  const StageMemory& big = *std::max_element(
      e.stages.begin(), e.stages.end(),
      [](const StageMemory& a, const StageMemory& b) { return a.parameter_count < b.parameter_count; });
  const LD experts_per_rank = f.moe ? ld(big.layers) * ld(s.n_experts) * 3 * D * ld(s.expert_d_ff()) / ep : 0;
  const LD dense = (big.parameter_count - experts_per_rank) * 4, experts = experts_per_rank * 4;
  std::vector<GroupTraffic> out;
  if (l.dp * l.cp > 1) {
    GroupTraffic t{l.cp > 1 ? "dp-cp" : "dp", static_cast<int>(l.dp * l.cp), 0, ""};
    const LD edp = std::max<LD>(dp / ep, 1);
    const LD grads = all_reduce(dense, dp) + all_reduce(experts, edp);  // = reduce-scatter + all-gather
    const LD weights = gather(dense, dp) + gather(experts, edp);
    switch (l.zero_stage) {
      case 0:
        t.bytes = grads, t.what = "all-reduce of the gradients";
        break;
      case 1:
        t.bytes = grads, t.what = "reduce-scatter of the gradients, all-gather of the weights";
        break;
      case 2:
        t.bytes = m * grads / 2 + weights;
        t.what = "reduce-scatter of each micro-batch's gradients, all-gather of the weights";
        break;
      default:
        t.bytes = m * (grads / 2 + 2 * weights);
        t.what = "all-gather of the weights in each forward and backward, reduce-scatter of the gradients";
    }
    out.push_back(t);
  }
  if (l.tp > 1) {
    // Two all-reduces in each block's forward and two in its backward (the same volume as sequence
    // parallelism's all-gathers and reduce-scatters), two more when the forward is recomputed, and the
    // embedding's forward all-reduce.
    const LD per = all_reduce(tokens * D * value, tp);
    const int per_layer = l.checkpointing || l.zero_stage >= 3 ? 6 : 4;
    out.push_back({"tp", static_cast<int>(l.tp), m * per * (per_layer * ld(big.layers) + 1),
                   fmt::format("{} of the activations, {} per layer",
                               l.sequence_parallel ? "all-gathers / reduce-scatters" : "all-reduces", per_layer)});
  }
  if (l.pp > 1) {
    const LD v = l.schedule == "interleaved" ? ld(l.virtual_stages) : 1;
    out.push_back({"pp", static_cast<int>(l.pp), 2 * m * v * tokens * D * value / (l.sequence_parallel ? tp : 1),
                   "activations forward and their gradients back, per micro-batch"});
    if (s.tie_embeddings) {
      const LD vocab = ld(nn::padded_vocab_size(s.vocab_size, static_cast<int>(l.tp), s.vocab_divisible_by));
      out.push_back({"embedding", 2, all_reduce(vocab * D / tp * 4, 2), "all-reduce of the tied embedding's gradient"});
    }
  }
  if (l.cp > 1) {
    // Per layer and micro-batch. The ring: the rank's K and V (2 · tokens · kv_width) shifted c − 1 times
    // in the forward, again in the backward, where the f32 dK/dV accumulators make c shifts. The
    // all-to-all: q, k, v and out, each (c − 1)/c of the local tensor, in the forward and again
    // (dout, dq, dk, dv) in the backward. A recomputed forward repeats its part.
    const LD head_dim = D / ld(std::max<std::int64_t>(s.n_head, 1));
    const LD kv = 2 * tokens * ld(s.n_kv_head) * head_dim / tp;
    const LD forwards = l.checkpointing || l.zero_stage >= 3 ? 2 : 1;
    LD per_layer = 0;
    std::string what;
    if (l.cp_all_to_all) {
      per_layer = (forwards + 1) * (cp - 1) / cp * (2 * tokens * D / tp + kv) * value;
      what = "all-to-alls of q, k, v and the output, 4 per layer forward and 4 backward";
    } else {
      per_layer = (forwards + 1) * (cp - 1) * kv * value + cp * kv * 4;
      what = "K/V blocks around the ring, and the dK/dV accumulators in the backward";
    }
    out.push_back({"cp", static_cast<int>(l.cp), m * ld(big.layers) * per_layer, what});
  }
  if (l.ep > 1) {
    // Dispatch and combine, forward and backward: each token's k rows of d_model values, per MoE layer.
    const LD rows = tokens * ld(s.experts_per_token) * D * value;
    out.push_back({"ep", static_cast<int>(l.ep), m * ld(big.layers) * 4 * gather(rows, ep),
                   "all-to-all of routed tokens, 4 per layer"});
  }
  return out;
}

LayoutCost layout_cost(const Config& c, const models::TransformerSpec& s, const MemoryLayout& l, const Hardware& h) {
  LayoutCost cost;
  cost.layout = l;
  cost.memory = estimate_memory(c, s, l);
  cost.traffic = step_traffic(c, s, l);
  cost.bubble = bubble_fraction(l);
  // Block-sparse attention computes the layout's share of the score pairs (of the causal ones, for a
  // causal model): its density scales the attention term.
  const LD attention_share =
      s.sparse_attention.active()
          ? static_cast<LD>(models::layout_density(models::shared_block_layout(s),
                                      models::generates(models::family(s.family).objective)))
          : 1;
  const LD flops_per_token = 6 * ld(s.active_parameters()) +
                             12 * ld(s.n_layer) * ld(s.d_model) * ld(c.train.seq_len) * attention_share;
  const LD tokens = ld(c.train.micro_batch_size) * ld(c.train.seq_len) * ld(l.accumulation) * ld(l.dp);
  // Recomputation runs each forward twice: 8 instead of 6 FLOPs per parameter and token.
  const LD work = flops_per_token * tokens * (l.checkpointing ? 8.0L / 6 : 1) / ld(l.ranks());
  cost.compute_s = h.flops > 0 ? work / h.flops / (1 - cost.bubble) : 0;
  const LD backward_s = cost.compute_s * (1 - cost.bubble) * 2 / 3;
  for (const GroupTraffic& t : cost.traffic) {
    // The ranks of a group are `stride` apart (the rank order tp, cp, ep/dp, pp).
    const std::int64_t stride = t.group == "tp"                         ? 1
                                : t.group == "cp" || t.group == "dp-cp" ? l.tp
                                : t.group == "dp" || t.group == "ep"    ? l.tp * l.cp
                                                                        : l.tp * l.cp * l.dp;
    const LD bw = within_node(t.size, stride, h) ? h.intra_bytes_per_s : h.link_bytes_per_s;
    const LD seconds = bw > 0 ? t.bytes / bw : 0;
    // ZeRO-0/1's gradient reduction overlaps the backward (buckets launched as gradients are ready); the
    // rest waits on the critical path.
    cost.communication_s +=
        (t.group == "dp" || t.group == "dp-cp") && l.zero_stage <= 1 ? std::max<LD>(0, seconds - backward_s) : seconds;
  }
  return cost;
}

std::vector<LayoutCost> search_layouts(const Config& c, const models::TransformerSpec& s, int ranks,
                                       long double memory_bytes, const Hardware& h) {
  std::vector<LayoutCost> fits;
  const bool moe = models::family(s.family).moe;
  // One global batch for every layout, so that their step times compare: the configuration's, else one
  // micro-batch per rank (what pure data parallelism would take).
  const std::int64_t global = c.train.global_batch_size > 0
                                  ? c.train.global_batch_size
                                  : c.train.micro_batch_size * static_cast<std::int64_t>(ranks);
  // Context parallelism is proposed for sequences long enough that each of its 2·cp chunks fills a
  // 64-token attention tile.
  const auto cp_candidate = [&](std::int64_t cp) {
    return cp == 1 || (c.train.seq_len % (2 * cp) == 0 && c.train.seq_len >= 2 * cp * 64);
  };
  for (std::int64_t tp = 1; tp <= ranks; tp *= 2) {
    for (std::int64_t cp = 1; tp * cp <= ranks; cp *= 2) {
      if (!cp_candidate(cp)) continue;
      for (std::int64_t pp = 1; tp * cp * pp <= ranks; ++pp) {
        if (ranks % (tp * cp * pp) != 0) continue;
        const std::int64_t dp = ranks / (tp * cp * pp);
        for (std::int64_t ep = 1; ep <= (moe ? dp : 1); ep *= 2) {
          for (int zero = 0; zero <= (dp * cp > 1 ? 3 : 0); ++zero) {  // ZeRO partitions over dp × cp
            for (int ckpt = 0; ckpt <= 1; ++ckpt) {
              for (int sp = 0; sp <= (tp > 1 && !moe ? 1 : 0); ++sp) {
                MemoryLayout l;
                l.dp = dp, l.tp = tp, l.pp = pp, l.ep = ep, l.cp = cp, l.zero_stage = zero;
                l.checkpointing = ckpt != 0;
                l.sequence_parallel = sp != 0;
                l.schedule = "1f1b";
                Config candidate = with_layout(c, l);
                candidate.dist.pipeline_num_layers.clear();
                candidate.train.global_batch_size = global;
                try {
                  validate_layout(candidate, ranks);
                  s.validate_tensor_parallel(static_cast<int>(tp));
                  s.validate_expert_parallel(static_cast<int>(ep));
                  s.validate_context_parallel(static_cast<int>(cp), static_cast<int>(tp), false);
                  if (pp > 1) (void)models::family(s.family).partition(s.n_layer, static_cast<int>(pp), {});
                } catch (const Error&) {
                  continue;
                }
                MemoryLayout resolved = memory_layout(candidate, ranks);
                LayoutCost cost = layout_cost(candidate, s, resolved, h);
                if (cost.memory.total() <= memory_bytes) fits.push_back(std::move(cost));
              }
            }
          }
        }
      }
    }
  }
  std::stable_sort(fits.begin(), fits.end(), [](const LayoutCost& a, const LayoutCost& b) {
    return a.step_s() < b.step_s() || (a.step_s() == b.step_s() && a.memory.total() < b.memory.total());
  });
  return fits;
}

std::string format_plan(const Config& c, const models::TransformerSpec& s, const LayoutCost& cost) {
  const MemoryLayout& l = cost.layout;
  std::string out =
      fmt::format("{} ({:.3g} parameters), {} ranks: {}, micro-batch {} × {} tokens, {} micro-batches per step, {}\n",
                  models::family(s.family).display_name, static_cast<double>(cost.memory.parameter_count), l.ranks(),
                  l.describe(), c.train.micro_batch_size, c.train.seq_len, l.accumulation, c.train.precision);
  if (s.sparse_attention.active()) {
    const bool causal = models::generates(models::family(s.family).objective);
    out += fmt::format("block-sparse attention ({}, blocks of {}): {:.3f} of the {}score pairs, in the step time\n",
                       s.sparse_attention.mode, s.sparse_attention.block,
                       models::layout_density(models::shared_block_layout(s), causal), causal ? "causal " : "");
  }
  // Sequence parallelism's activations are shown beside the layout's when there is tensor parallelism.
  const bool sp = l.tp > 1;
  out += fmt::format(
      "\nmemory per rank      weights   master  grads     optim     act/mb    act/mb ckpt{}  in flight  "
      "activations  total\n",
      sp ? "  act/mb sp" : "");
  for (const StageMemory& m : cost.memory.stages) {
    // In mixed precision the f32 weights are the master copy and the compute copies the weights used.
    const bool mixed = m.compute_copies > 0;
    out += fmt::format("  stage {:<3} {:>3} layers {:>9} {:>8} {:>9} {:>9} {:>9} {:>12}{} {:>9.2f}  {:>11}  {:>9}\n",
                       m.stage, m.layers, format_bytes(mixed ? m.compute_copies : m.weights),
                       mixed ? format_bytes(m.weights) : std::string("-"), format_bytes(m.gradients),
                       format_bytes(m.optimizer), format_bytes(m.activations_per_micro_batch),
                       format_bytes(m.activations_per_micro_batch_checkpointed),
                       sp ? fmt::format(" {:>10}", format_bytes(m.activations_per_micro_batch_sequence_parallel)) : "",
                       static_cast<double>(m.in_flight), format_bytes(m.transient()), format_bytes(m.total()));
  }
  out += "\ncommunication per step (bytes each rank sends)\n";
  if (cost.traffic.empty()) out += "  none (one rank)\n";
  for (const GroupTraffic& t : cost.traffic)
    out += fmt::format("  {:<10} {:>3} ranks {:>10}  {}\n", t.group, t.size, format_bytes(t.bytes), t.what);
  out += fmt::format("\npipeline bubble {:.1f}% of the step", 100 * static_cast<double>(cost.bubble));
  if (l.pp > 1) out += fmt::format(" ((pp − 1) / (m·v + pp − 1), {} schedule)", l.schedule);
  out += "\n";
  if (cost.compute_s > 0) {
    out += fmt::format("estimated step {:.3g} s (compute {:.3g} s, exposed communication {:.3g} s)\n",
                       static_cast<double>(cost.step_s()), static_cast<double>(cost.compute_s),
                       static_cast<double>(cost.communication_s));
  }
  return out;
}

std::string layout_flags(const Config& c, const MemoryLayout& l) {
  std::string flags = fmt::format(
      "--set dist.data_parallel_size={} --set dist.tensor_parallel_size={} --set dist.pipeline_parallel_size={} "
      "--set dist.zero_stage={}",
      l.dp, l.tp, l.pp, l.zero_stage);
  if (l.ep > 1 || c.dist.expert_parallel_size > 1) flags += fmt::format(" --set dist.expert_parallel_size={}", l.ep);
  if (l.cp > 1 || c.dist.context_parallel_size > 1) flags += fmt::format(" --set dist.context_parallel_size={}", l.cp);
  if (l.tp > 1 || c.dist.sequence_parallel)
    flags += fmt::format(" --set dist.sequence_parallel={}", l.sequence_parallel && l.tp > 1);
  if (l.pp > 1) flags += fmt::format(" --set 'dist.pipeline_schedule=\"{}\"'", l.schedule);
  flags += fmt::format(" --set train.activation_checkpointing={}", l.checkpointing);
  flags += fmt::format(" --set train.global_batch_size={}", c.train.micro_batch_size * l.accumulation * l.dp);
  return flags;
}

std::string format_search(const Config& c, const std::vector<LayoutCost>& fits, std::size_t top, int ranks,
                          long double memory_bytes, const LayoutCost* smallest) {
  std::string out = fmt::format("{} layouts of {} ranks fit in {} per rank; fastest first:\n", fits.size(), ranks,
                                format_bytes(memory_bytes));
  if (fits.empty()) {
    if (!smallest) return out;
    return out + fmt::format(
                     "  none: raise --memory-gb to at least {} (the smallest layout: {}), add ranks, or "
                     "shrink the model or micro-batch\n",
                     format_bytes(smallest->memory.total()), smallest->layout.describe());
  }
  out += "   #  layout                              memory/rank  step (s)  compute  comm    bubble\n";
  for (std::size_t i = 0; i < std::min(top, fits.size()); ++i) {
    const LayoutCost& f = fits[i];
    out +=
        fmt::format("  {:>2}  {:<34} {:>11}  {:>8.3g}  {:>7.3g}  {:>6.3g}  {:>5.1f}%\n", i + 1, f.layout.describe(),
                    format_bytes(f.memory.total()), static_cast<double>(f.step_s()), static_cast<double>(f.compute_s),
                    static_cast<double>(f.communication_s), 100 * static_cast<double>(f.bubble));
    out += fmt::format("      {}\n", layout_flags(c, f.layout));
  }
  return out;
}

}  // namespace trident::train
