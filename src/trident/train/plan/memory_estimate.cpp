#include "trident/train/plan/memory_estimate.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/models/family.h"
#include "trident/nn/tensor_parallel.h"
#include "trident/optim/registry.h"

namespace trident::train {

namespace {

using LD = long double;

LD ld(std::int64_t v) {
  return static_cast<LD>(v);
}

// The parts of the parameter count, each with the keys that size it.
struct ParameterPart {
  LD count;
  std::string keys;
};

std::vector<ParameterPart> parameter_parts(const models::TransformerSpec& s) {
  const models::Family& f = models::family(s.family);
  const LD D = ld(s.d_model), V = ld(s.vocab_size);
  std::vector<ParameterPart> parts;
  parts.push_back({V * D * (s.tie_embeddings ? 1 : 2),
                   fmt::format("model.vocab_size={} × model.d_model={}", s.vocab_size, s.d_model)});
  if (!f.names.position_embedding.empty()) {
    parts.push_back(
        {ld(s.max_seq_len) * D, fmt::format("model.max_seq_len={} × model.d_model={}", s.max_seq_len, s.d_model)});
  }
  parts.push_back({ld(s.n_layer) * f.block_parameters(s) + f.other_parameters(s),
                   fmt::format("model.n_layer={} × (model.d_model={}, model.d_ff={})", s.n_layer, s.d_model, s.d_ff)});
  return parts;
}

}  // namespace

std::string format_bytes(long double bytes) {
  static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (!std::isfinite(static_cast<double>(bytes))) return "more bytes than a long double holds";
  int u = 0;
  LD v = bytes;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} bytes", static_cast<double>(v));
  if (v >= 1e4) return fmt::format("{:.2e} {}", static_cast<double>(v), units[u]);
  return fmt::format("{:.1f} {}", static_cast<double>(v), units[u]);
}

std::string MemoryEstimate::describe() const {
  return fmt::format("about {} per rank (parameters {}, gradients {}, optimizer state {}, activations {})",
                     format_bytes(total()), format_bytes(parameters), format_bytes(gradients), format_bytes(optimizer),
                     format_bytes(activations));
}

std::string MemoryLayout::describe() const {
  std::string s = fmt::format("dp{} tp{}", dp, tp);
  if (cp > 1) s += fmt::format(" cp{}{}", cp, cp_all_to_all ? " (all-to-all)" : "");
  s += fmt::format(" pp{}", pp);
  if (ep > 1) s += fmt::format(" ep{}", ep);
  if (pp > 1)
    s += virtual_stages > 1 ? fmt::format(" ({} v{})", schedule, virtual_stages) : fmt::format(" ({})", schedule);
  if (zero_stage > 0) s += fmt::format(" zero{}", zero_stage);
  if (sequence_parallel && tp > 1) s += " sp";
  if (checkpointing) s += " ckpt";
  return s;
}

MemoryLayout memory_layout(const Config& c, int world_size) {
  MemoryLayout l;
  l.tp = std::max<std::int64_t>(c.dist.tensor_parallel_size, 1);
  l.pp = std::max<std::int64_t>(c.dist.pipeline_parallel_size, 1);
  l.cp = std::max<std::int64_t>(c.dist.context_parallel_size, 1);
  l.cp_all_to_all = c.dist.context_parallel_algorithm == "all_to_all";
  l.dp = c.dist.data_parallel_size > 0
             ? c.dist.data_parallel_size
             : std::max<std::int64_t>(world_size / std::max<std::int64_t>(l.tp * l.pp * l.cp, 1), 1);
  l.ep = std::max<std::int64_t>(c.dist.expert_parallel_size, 1);
  l.virtual_stages = std::max<std::int64_t>(c.dist.virtual_pipeline_size, 1);
  l.zero_stage = c.dist.zero_stage;
  l.schedule = c.dist.pipeline_schedule;
  l.sequence_parallel = c.dist.sequence_parallel;
  l.checkpointing = c.train.activation_checkpointing;
  const LD per_step = ld(std::max<std::int64_t>(c.train.micro_batch_size, 1)) * ld(l.dp);
  const LD accum = c.train.global_batch_size > 0 ? ld(c.train.global_batch_size) / per_step : 1;
  l.accumulation = accum >= 9e18L ? std::int64_t{9'000'000'000'000'000'000}
                                  : std::max<std::int64_t>(1, static_cast<std::int64_t>(accum));
  return l;
}

namespace {

// The parameters one rank of a stage holds: `dense` are replicated over the data-parallel group,
// `experts` over the expert-data-parallel group; `largest` is its largest tensor (the reduce's buffers).
struct RankParameters {
  LD dense = 0, experts = 0, largest = 0;
  LD block = 0;  // of one of its blocks (a unit ZeRO-3 gathers)
};

// The stages' layer ranges, per pipeline rank (its model chunks merged).
struct RankStage {
  std::int64_t layers = 0;
  bool embed = false, head = false;
};

std::vector<RankStage> rank_stages(const models::TransformerSpec& s, const Config& c, const MemoryLayout& l) {
  std::vector<RankStage> out(static_cast<std::size_t>(std::max<std::int64_t>(l.pp, 1)));
  if (l.pp <= 1) {
    out[0] = {s.n_layer, true, true};
    return out;
  }
  const auto& counts = c.dist.pipeline_num_layers;
  const std::int64_t chunks = l.pp * l.virtual_stages;
  // Evenly when the counts do not fit (the layout search meets layer counts the split refuses first).
  std::vector<models::StageRange> ranges;
  if (s.n_layer % chunks == 0 || static_cast<std::int64_t>(counts.size()) == chunks) {
    ranges = models::family(s.family).partition(s.n_layer, static_cast<int>(chunks), counts);
  }
  for (std::int64_t v = 0; v < chunks; ++v) {
    RankStage& r = out[static_cast<std::size_t>(v % l.pp)];
    if (ranges.empty()) {
      r.layers += (s.n_layer + chunks - 1) / chunks;
      r.embed = r.embed || v == 0;
      r.head = r.head || v == chunks - 1;
      continue;
    }
    const models::StageRange& g = ranges[static_cast<std::size_t>(v)];
    r.layers += (g.last_layer < 0 ? s.n_layer : g.last_layer) - g.first_layer;
    r.embed = r.embed || g.embed;
    r.head = r.head || g.head;
  }
  return out;
}

RankParameters rank_parameters(const models::TransformerSpec& s, const MemoryLayout& l, const RankStage& st) {
  const models::Family& f = models::family(s.family);
  const LD D = ld(s.d_model), tp = ld(l.tp);
  const LD vocab = ld(nn::padded_vocab_size(s.vocab_size, static_cast<int>(l.tp), s.vocab_divisible_by)) * D / tp;
  RankParameters p;
  if (st.embed) {
    p.dense += vocab;
    if (!f.names.position_embedding.empty()) p.dense += ld(s.max_seq_len) * D;
  }
  if (st.head) {
    if (!s.tie_embeddings || !st.embed) p.dense += vocab;
    p.dense += f.other_parameters(s);
  }
  if (st.embed || st.head) p.largest = vocab;
  const LD block = f.block_parameters(s);
  const LD Fe = ld(s.expert_d_ff());
  const LD experts = f.moe ? ld(s.n_experts) * 3 * D * Fe : 0;
  // An MoE block's router and shared expert run whole on every tensor-parallel rank, like its experts.
  const LD moe_whole =
      f.moe ? D * ld(s.n_experts) + (s.moe_shared_d_ff > 0 ? 3 * D * ld(s.moe_shared_d_ff) + D : 0) : 0;
  const LD layers = ld(st.layers);
  p.block = (block - experts - moe_whole) / tp + moe_whole + experts / ld(l.ep);
  p.dense += layers * ((block - experts - moe_whole) / tp + moe_whole);
  p.experts = layers * experts / ld(l.ep);
  p.largest = std::max(p.largest, f.moe ? D * Fe : D * ld(s.d_ff) / tp);
  return p;
}

// Micro-batches whose activations pipeline rank `r` holds at once under the schedule.
LD in_flight(const MemoryLayout& l, std::int64_t r) {
  const LD m = ld(l.accumulation), pp = ld(l.pp);
  if (l.pp <= 1) return 1;
  if (l.schedule == "gpipe") return m;
  if (l.schedule == "interleaved" && l.virtual_stages > 1) {
    const LD v = ld(l.virtual_stages);
    const LD chunks = std::min(m * v, 2 * (pp - ld(r) - 1) + (v - 1) * pp + 1);
    return chunks / v;
  }
  return std::min(pp - ld(r), m);
}

}  // namespace

MemoryEstimate estimate_memory(const Config& c, const models::TransformerSpec& s, const MemoryLayout& l) {
  MemoryEstimate e;
  for (const ParameterPart& p : parameter_parts(s)) e.parameter_count += p.count;
  const models::Family& f = models::family(s.family);
  const LD tp = ld(std::max<std::int64_t>(l.tp, 1)), cp = ld(std::max<std::int64_t>(l.cp, 1));
  // ZeRO partitions over the ranks that reduce the same gradients: dp × cp (experts: dp × cp / ep).
  const LD dp = ld(std::max<std::int64_t>(l.dp, 1)) * cp;
  const LD edp = std::max<LD>(dp / ld(std::max<std::int64_t>(l.ep, 1)), 1);
  const DType precision = parse_precision(c.train.precision, "train.precision");
  const LD value = precision == DType::f32 ? 4 : 2;
  const bool fp16 = precision == DType::f16;
  const LD moments = ld(optim::optimizer_def(c.optim.name).state_bytes(DType::f32));  // per f32 master weight
  const LD tokens = ld(c.train.micro_batch_size) * ld(c.train.seq_len) / cp;  // this rank's, per micro-batch
  const models::Family::SavedValues saved = f.block_activations(s);
  // Context parallelism's attention, in bytes per local token, held during a layer's backward: the ring's
  // K/V block at hand and the one arriving (compute dtype) and the dK/dV accumulators (f32, two), and dq's
  // f32 accumulator; the all-to-all's whole-sequence q, k, v and out over its heads and their gradients
  // (the same counts as the local tensors').
  const LD head_dim = ld(s.d_model) / ld(std::max<std::int64_t>(s.n_head, 1));
  const LD q_width = ld(s.d_model) / tp, kv_width = ld(s.n_kv_head) * head_dim / tp;
  const LD cp_attention =
      l.cp <= 1 ? 0
      : l.cp_all_to_all ? (2 * q_width + 2 * kv_width) * 2 * value
                        : 2 * 2 * kv_width * value + 2 * 2 * kv_width * 4 + q_width * 4;
  // Dropless routing does not bound the rows an expert-parallel rank receives: the busiest is taken
  // as 1.3× the mean (the measured spread of the test's routers); a capacity factor bounds it.
  const LD imbalance =
      l.ep > 1 ? (s.moe_capacity_factor > 0 ? std::min<LD>(s.moe_capacity_factor, ld(l.ep)) : 1.3L) : 1;
  const LD per_layer_sp = saved.replicated / tp + saved.split / tp + saved.experts * imbalance;
  const LD per_layer = l.sequence_parallel ? per_layer_sp : per_layer_sp + saved.replicated * (1 - 1 / tp);
  const LD backward = saved.backward / tp;
  const LD layer_input = ld(s.d_model) / (l.sequence_parallel ? tp : 1);
  // ZeRO-3 recomputes each unit in the backward (its weights are gathered again there), as checkpointing does.
  const bool recompute = l.checkpointing || l.zero_stage >= 3;
  const LD vocab = ld(nn::padded_vocab_size(s.vocab_size, static_cast<int>(l.tp), s.vocab_divisible_by)) / tp;
  const std::vector<RankStage> stages = rank_stages(s, c, l);
  for (std::size_t r = 0; r < stages.size(); ++r) {
    const RankParameters p = rank_parameters(s, l, stages[r]);
    StageMemory m;
    m.stage = static_cast<int>(r);
    m.layers = stages[r].layers;
    m.parameter_count = p.dense + p.experts;
    // Each part sharded (or not) by the ZeRO stage: the dense part over dp, the experts over dp / ep.
    const auto sharded = [&](LD bytes_per_value, std::int64_t from_stage) {
      return l.zero_stage >= from_stage ? bytes_per_value * (p.dense / dp + p.experts / edp)
                                        : bytes_per_value * m.parameter_count;
    };
    m.weights = sharded(4, 3);
    m.compute_copies = value < 4 && l.zero_stage < 3 ? value * m.parameter_count : 0;
    m.gradients = sharded(4, 2);
    m.optimizer = sharded(moments, 1);
    m.activations_per_micro_batch = tokens * value * ld(m.layers) * per_layer;
    m.activations_per_micro_batch_checkpointed = tokens * value * ld(m.layers) * layer_input;
    m.activations_per_micro_batch_sequence_parallel = tokens * value * ld(m.layers) * per_layer_sp;
    m.in_flight = in_flight(l, static_cast<std::int64_t>(r));
    m.activations =
        m.in_flight * (recompute ? m.activations_per_micro_batch_checkpointed : m.activations_per_micro_batch);
    // Beside them: the logits and their gradient (last stage), or one block's backward, recomputed first
    // under checkpointing. Under ZeRO-3 the first block's backward also holds its gathered weights and
    // the other blocks' whole gradients, which build up during the backward before the reduce-scatter.
    // fp16 (loss scaling) holds one more logits-sized 16-bit buffer, and the token embedding's gradient in
    // f32 beside its master gradient (measured: bf16's peaks match without them, fp16's did not).
    m.working = std::max(stages[r].head ? (fp16 ? 3 : 2) * vocab * value * tokens : 0,
                         m.layers > 0 ? tokens * (value * (backward + (recompute ? per_layer : 0)) + cp_attention)
                                      : 0);
    if (fp16 && stages[r].embed) m.working += 4 * vocab * ld(s.d_model);
    if (l.zero_stage >= 3) m.working += 4 * m.parameter_count + (value < 4 ? value * p.block : 0);
    // After the backward: ZeRO reduce-scatters each gradient through a padded copy and a shard of it
    // (and ZeRO-2/3 build the whole gradient first); ZeRO-1/2 all-gather the updated weights likewise.
    const LD buffers = l.zero_stage >= 1 && dp > 1 ? 4 * p.largest * (1 + 1 / dp) : 0;
    m.reduce = buffers + (l.zero_stage >= 2 ? 4 * m.parameter_count : 0);
    e.stages.push_back(m);
  }
  const StageMemory& peak =
      *std::max_element(e.stages.begin(), e.stages.end(),
                        [](const StageMemory& a, const StageMemory& b) { return a.total() < b.total(); });
  e.parameters = peak.weights + peak.compute_copies;
  e.gradients = peak.gradients;
  e.optimizer = peak.optimizer;
  e.activations = peak.transient();
  return e;
}

long double host_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("MemTotal:")) continue;
    std::istringstream fields(line.substr(9));
    long double kib = 0;
    if (fields >> kib && kib > 0) return kib * 1024;
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? ld(pages) * ld(page) : 0;
}

namespace {

// The sizes that drive an estimate dominated by activations, as "key=value × key=value": each size is
// doubled in turn, and those whose doubling grows the estimate by at least half as much as the largest
// growth are named, in this order. So a vocabulary of billions (the logits) or a feed-forward width (the
// blocks' saved values) is named where it is the cause, beside the batch and sequence that multiply it.
std::string activation_keys(const Config& c, const models::TransformerSpec& s, const MemoryLayout& l, LD total) {
  struct Size {
    const char* key;
    std::int64_t value;
    void (*twice)(Config&, models::TransformerSpec&);
  };
  const Size sizes[] = {
      {"train.micro_batch_size", c.train.micro_batch_size,
       [](Config& x, models::TransformerSpec&) { x.train.micro_batch_size *= 2; }},
      {"train.seq_len", c.train.seq_len, [](Config& x, models::TransformerSpec&) { x.train.seq_len *= 2; }},
      {"model.n_layer", s.n_layer, [](Config&, models::TransformerSpec& t) { t.n_layer *= 2; }},
      {"model.d_model", s.d_model, [](Config&, models::TransformerSpec& t) { t.d_model *= 2; }},
      {"model.d_ff", s.d_ff, [](Config&, models::TransformerSpec& t) { t.d_ff *= 2; }},
      {"model.moe_d_ff", s.moe_d_ff, [](Config&, models::TransformerSpec& t) { t.moe_d_ff *= 2; }},
      {"model.vocab_size", s.vocab_size, [](Config&, models::TransformerSpec& t) { t.vocab_size *= 2; }},
  };
  std::vector<std::pair<const Size*, LD>> growth;
  LD most = 0;
  for (const Size& size : sizes) {
    if (size.value <= 0 || size.value > (std::int64_t{1} << 61)) continue;  // unset, or no room to double
    Config c2 = c;
    models::TransformerSpec s2 = s;
    size.twice(c2, s2);
    const LD g = estimate_memory(c2, s2, l).total() - total;
    growth.emplace_back(&size, g);
    most = std::max(most, g);
  }
  std::string keys;
  for (const auto& [size, g] : growth) {
    if (g < most / 2) continue;
    keys += fmt::format("{}{}={}", keys.empty() ? "" : " × ", size->key, size->value);
  }
  return keys;
}

}  // namespace

void check_memory_fits(const Config& c, const models::TransformerSpec& s, const MemoryLayout& l, long double available,
                       const std::string& where, bool parameters_only) {
  if (available <= 0) return;
  const MemoryEstimate e = estimate_memory(c, s, l);
  if ((parameters_only ? e.parameters : e.total()) <= available) return;
  // Name the keys of the largest part.
  std::string keys;
  if (!parameters_only && e.activations >= e.parameters + e.gradients + e.optimizer) {
    keys = activation_keys(c, s, l, e.total());
  } else {
    const std::vector<ParameterPart> parts = parameter_parts(s);
    const auto largest = std::max_element(
        parts.begin(), parts.end(), [](const ParameterPart& a, const ParameterPart& b) { return a.count < b.count; });
    keys = largest->keys;
  }
  TRIDENT_FAIL(
      "the configuration cannot fit in memory: {} ({:.3g} parameters) needs {}, but {} has {}; reduce those sizes "
      "or spread the model over more ranks (dist.*)",
      keys, static_cast<double>(e.parameter_count),
      parameters_only ? fmt::format("{} per rank for its parameters", format_bytes(e.parameters)) : e.describe(), where,
      format_bytes(available));
}

}  // namespace trident::train
