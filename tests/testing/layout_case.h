// One case of the layout-equivalence tests (tests/train/*_layout_test.cpp, *_parallel_test.cpp): the
// parallel sizes, named as dist::Layout names them, and the options the cases vary; the dist.* overrides
// that give a job that layout; and the case's name (its test name and run directory). The sizes are the
// job's: a test's single-process reference takes none of the overrides.
#pragma once

#include <fmt/format.h>

#include <ostream>
#include <string>
#include <vector>

namespace trident::testing {

struct LayoutCase {
  std::string arch = "gpt2";
  int dp = 1, tp = 1, pp = 1, ep = 1;  // dp is the whole data-parallel size (inferred by the job); ep divides it
  bool sp = false;                     // dist.sequence_parallel
  int zero = 0;                        // dist.zero_stage
  std::string schedule = "1f1b";       // dist.pipeline_schedule; interleaved runs 2 chunks per rank
  std::string layers = {};             // dist.pipeline_num_layers, e.g. "[3, 5]"; empty: an even split
  bool checkpointing = false;          // train.activation_checkpointing
  double capacity = 0;                 // model.moe_capacity_factor of the MoE cases (0: dropless)
  int cp = 1;                          // dist.context_parallel_size
  std::string cp_algorithm = "ring";   // dist.context_parallel_algorithm

  int ranks() const { return dp * tp * pp * cp; }

  // "gpt2_dp2_tp2_pp2_1f1b_sp_zero1": the sizes above 1 and the options that are on.
  std::string name() const {
    std::string n = fmt::format("{}_dp{}", arch, dp);
    if (tp > 1) n += fmt::format("_tp{}", tp);
    if (cp > 1) n += fmt::format("_cp{}", cp) + (cp_algorithm == "all_to_all" ? "_a2a" : "");
    if (pp > 1) n += fmt::format("_pp{}_{}", pp, schedule);
    if (ep > 1) n += fmt::format("_ep{}", ep);
    if (sp) n += "_sp";
    if (zero > 0) n += fmt::format("_zero{}", zero);
    if (checkpointing) n += "_ckpt";
    if (capacity > 0) n += "_capacity";
    if (!layers.empty()) n += "_split";
    return n;
  }

  // The job's overrides for this layout (the model's are the test's).
  std::vector<std::string> overrides() const {
    std::vector<std::string> o = {fmt::format("dist.tensor_parallel_size={}", tp),
                                  fmt::format("dist.pipeline_parallel_size={}", pp),
                                  fmt::format("dist.expert_parallel_size={}", ep),
                                  fmt::format("dist.sequence_parallel={}", sp),
                                  fmt::format("dist.zero_stage={}", zero),
                                  fmt::format("dist.pipeline_schedule=\"{}\"", schedule),
                                  fmt::format("train.activation_checkpointing={}", checkpointing),
                                  fmt::format("dist.context_parallel_size={}", cp),
                                  fmt::format("dist.context_parallel_algorithm=\"{}\"", cp_algorithm)};
    if (schedule == "interleaved") o.emplace_back("dist.virtual_pipeline_size=2");
    if (!layers.empty()) o.push_back("dist.pipeline_num_layers=" + layers);
    return o;
  }
};

inline void PrintTo(const LayoutCase& l, std::ostream* os) { *os << l.name(); }

}  // namespace trident::testing
