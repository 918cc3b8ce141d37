// `trident plan`: what a layout costs before any work — memory per rank (memory_estimate.h, the model
// the training command's check uses), communication per step per group, the pipeline bubble and an
// estimated step time — and, for a rank count, the layouts that fit a memory limit ranked by that time
// (docs/parallelism.md#memory-and-planning).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trident/models/spec.h"
#include "trident/train/config/config.h"
#include "trident/train/plan/memory_estimate.h"

namespace trident::train {

// One group's traffic in one optimizer step, as the bytes each of its ranks sends (ring algorithms:
// an all-reduce sends 2(g−1)/g of its payload, a reduce-scatter or all-gather (g−1)/g).
struct GroupTraffic {
  std::string group;  // "dp", "tp", "pp", "ep", "embedding"
  int size = 1;       // ranks in the group
  long double bytes = 0;
  std::string what;  // "all-reduce of the gradients", ...
};

// The machine a plan is for: per-GPU (or per-process) FLOP rate and the links between ranks.
struct Hardware {
  long double flops = 0;              // FLOP/s per rank
  long double link_bytes_per_s = 0;   // between nodes
  long double intra_bytes_per_s = 0;  // within a node
  std::int64_t node_size = 8;         // ranks per node
};

struct LayoutCost {
  MemoryLayout layout;
  MemoryEstimate memory;
  std::vector<GroupTraffic> traffic;
  long double bubble = 0;           // idle time over the whole step: (pp − 1) / (m·v + pp − 1)
  long double compute_s = 0;        // the step's FLOPs on this layout, bubble and recomputation included
  long double communication_s = 0;  // traffic not hidden behind compute
  long double step_s() const { return compute_s + communication_s; }
};

// Communication per optimizer step of `layout` (groups of size 1 are left out).
std::vector<GroupTraffic> step_traffic(const Config& config, const models::TransformerSpec& spec,
                                       const MemoryLayout& layout);
// The pipeline bubble of the layout's schedule, as a fraction of the step.
long double bubble_fraction(const MemoryLayout& layout);
// Memory, traffic, bubble and step time of one layout.
LayoutCost layout_cost(const Config& config, const models::TransformerSpec& spec, const MemoryLayout& layout,
                       const Hardware& hardware);

// Every layout of `ranks` ranks (dp × tp × pp × ep, ZeRO stage, activation checkpointing, sequence
// parallelism) that validate_layout and the model's tensor-parallel rules accept, whose largest rank
// fits `memory_bytes`, fastest first. The configuration's global batch is kept (micro-batch size ×
// `ranks` when unset, so that every layout's step trains the same samples), and its micro-batch size; a
// layout it does not divide is left out.
std::vector<LayoutCost> search_layouts(const Config& config, const models::TransformerSpec& spec, int ranks,
                                       long double memory_bytes, const Hardware& hardware);

// The model's sizes as the training command resolves them; data.tokenizer is read only when
// model.vocab_size is 0 (and from_pretrained is unset), for its vocabulary size.
models::TransformerSpec planned_spec(const Config& config);

// This machine's CPU matmul peak in train.precision, FLOP/s (what training measures for MFU).
long double measured_peak_flops(const Config& config);

// `config` with `layout`'s dist.* and train.activation_checkpointing.
Config with_layout(Config config, const MemoryLayout& layout);

// The report of one layout (per-stage memory table, traffic, bubble, time), and the search's table.
std::string format_plan(const Config& config, const models::TransformerSpec& spec, const LayoutCost& cost);
// The search's table, each layout followed by the --set flags that train it from `config`. With no
// layout that fits, `smallest` (the valid layout of the least memory, when there is one) says how much
// memory would do.
std::string format_search(const Config& config, const std::vector<LayoutCost>& fits, std::size_t top, int ranks,
                          long double memory_bytes, const LayoutCost* smallest = nullptr);

// The --set flags that give `config` the layout `layout` (its dist.* keys, activation checkpointing and
// the global batch the layout was costed with), for `trident train` or `trident plan`.
std::string layout_flags(const Config& config, const MemoryLayout& layout);

}  // namespace trident::train
