#include "trident/train/memory_estimate.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/models/family.h"

namespace trident::train {

namespace {

using LD = long double;

LD ld(std::int64_t v) { return static_cast<LD>(v); }

// The parts of the parameter count, each with the keys that size it.
struct ParameterPart {
  LD count;
  std::string keys;
};

std::vector<ParameterPart> parameter_parts(const models::TransformerSpec& s) {
  const models::Family& f = models::family(s.family);
  const LD D = ld(s.d_model), V = ld(s.vocab_size);
  std::vector<ParameterPart> parts;
  parts.push_back({V * D * (s.tie_embeddings ? 1 : 2), fmt::format("model.vocab_size={} × model.d_model={}",
                                                                    s.vocab_size, s.d_model)});
  if (!f.names.position_embedding.empty()) {
    parts.push_back({ld(s.max_seq_len) * D, fmt::format("model.max_seq_len={} × model.d_model={}", s.max_seq_len,
                                                        s.d_model)});
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

MemoryLayout memory_layout(const Config& c, int world_size) {
  MemoryLayout l;
  l.tp = std::max<std::int64_t>(c.dist.tensor_parallel_size, 1);
  l.pp = std::max<std::int64_t>(c.dist.pipeline_parallel_size, 1);
  l.dp = c.dist.data_parallel_size > 0 ? c.dist.data_parallel_size
                                       : std::max<std::int64_t>(world_size / std::max<std::int64_t>(l.tp * l.pp, 1), 1);
  l.zero_stage = c.dist.zero_stage;
  const LD per_step = ld(std::max<std::int64_t>(c.train.micro_batch_size, 1)) * ld(l.dp);
  const LD accum = c.train.global_batch_size > 0 ? ld(c.train.global_batch_size) / per_step : 1;
  l.accumulation = accum >= 9e18L ? std::int64_t{9'000'000'000'000'000'000} : std::max<std::int64_t>(1, static_cast<std::int64_t>(accum));
  return l;
}

MemoryEstimate estimate_memory(const Config& c, const models::TransformerSpec& s, const MemoryLayout& l) {
  MemoryEstimate e;
  for (const ParameterPart& p : parameter_parts(s)) e.parameter_count += p.count;
  const LD tp = ld(std::max<std::int64_t>(l.tp, 1)), pp = ld(std::max<std::int64_t>(l.pp, 1));
  const LD dp = ld(std::max<std::int64_t>(l.dp, 1));
  const LD share = e.parameter_count / (tp * pp);
  e.parameters = share * 4 / (l.zero_stage >= 3 ? dp : 1);
  e.gradients = share * 4 / (l.zero_stage >= 2 ? dp : 1);
  e.optimizer = share * (c.optim.name == "sgd" ? 4 : 8) / (l.zero_stage >= 1 ? dp : 1);

  const LD value = parse_precision(c.train.precision, "train.precision") == DType::f32 ? 4 : 2;
  const LD tokens = ld(c.train.micro_batch_size) * ld(c.train.seq_len);
  const LD D = ld(s.d_model), F = ld(s.d_ff);
  const LD layers = std::ceil(ld(s.n_layer) / pp);
  const LD whole_layer = (10 * D + 2 * F) * value / tp;
  const LD per_token = c.train.activation_checkpointing ? layers * D * value + whole_layer : layers * whole_layer;
  const LD in_flight = l.pp > 1 ? std::min(pp, ld(l.accumulation)) : 1;
  e.activations = tokens * (per_token * in_flight + 2 * ld(s.vocab_size) * 4 / tp);
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

void check_memory_fits(const Config& c, const models::TransformerSpec& s, const MemoryLayout& l, long double available,
                       const std::string& where, bool parameters_only) {
  if (available <= 0) return;
  const MemoryEstimate e = estimate_memory(c, s, l);
  if ((parameters_only ? e.parameters : e.total()) <= available) return;
  // Name the keys of the largest part.
  std::string keys;
  if (!parameters_only && e.activations >= e.parameters + e.gradients + e.optimizer) {
    keys = fmt::format("train.micro_batch_size={} × train.seq_len={} tokens × model.n_layer={} × model.d_model={}",
                       c.train.micro_batch_size, c.train.seq_len, s.n_layer, s.d_model);
  } else {
    const std::vector<ParameterPart> parts = parameter_parts(s);
    const auto largest = std::max_element(parts.begin(), parts.end(),
                                          [](const ParameterPart& a, const ParameterPart& b) { return a.count < b.count; });
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
