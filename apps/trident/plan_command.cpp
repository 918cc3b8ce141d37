// trident plan: memory per rank, communication, bubble and step time of a configuration's layout, or
// with -n and no layout in the configuration, the layouts of -n ranks that fit --memory-gb, fastest
// first (train/plan/plan.h, docs/parallelism.md#memory-and-planning). Nothing is allocated or trained. It exits
// with kDoesNotFit when the layout does not fit the memory limit, or no layout does, so that a script can
// stop before it submits the job.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "commands.h"
#include "trident/core/error.h"
#include "trident/train/plan/plan.h"
#include "trident/train/trainer.h"

namespace trident::cli {

namespace {

// The exit status of a plan whose layout, or every layout searched, is over the memory limit (an error
// exits 1).
constexpr int kDoesNotFit = 2;

struct PlanOptions {
  std::string config;
  std::vector<std::string> overrides;
  int ranks = 0;  // 0: -n not given
  double memory_gb = 0, flops_tflops = 0, link_gbps = 200, intra_gbps = 2400;
  int node_size = 8, top = 10;
};

// A positive finite number of the option `flag`, else one line naming it.
void check_positive(const char* flag, double value, bool zero_ok = false) {
  TRIDENT_CHECK(std::isfinite(value) && (value > 0 || (zero_ok && value == 0)), "{}={}: expected a positive number",
                flag, value);
}

// A FLOP rate in the unit that shows its digits: a busy CPU's few GFLOP/s read "0.0 TFLOP/s" before.
std::string flop_rate(long double flops) {
  const auto f = static_cast<double>(flops);
  if (f >= 1e12) return fmt::format("{:.1f} TFLOP/s", f / 1e12);
  if (f >= 1e9) return fmt::format("{:.1f} GFLOP/s", f / 1e9);
  return fmt::format("{:.3g} MFLOP/s", f / 1e6);
}

// The configuration names a layout when it sets any of the parallel sizes.
bool names_layout(const train::Config& c) {
  return c.dist.data_parallel_size > 0 || c.dist.tensor_parallel_size > 1 || c.dist.pipeline_parallel_size > 1 ||
         c.dist.expert_parallel_size > 1 || c.dist.context_parallel_size > 1;
}

void run_plan(const PlanOptions& o, bool ranks_given) {
  TRIDENT_CHECK(!ranks_given || o.ranks > 0, "-n {}: expected a positive number of ranks", o.ranks);
  check_positive("--memory-gb", o.memory_gb, true);
  check_positive("--flops-tflops", o.flops_tflops, true);
  check_positive("--link-gbps", o.link_gbps);
  check_positive("--intra-node-gbps", o.intra_gbps);
  TRIDENT_CHECK(o.node_size > 0, "--node-size={}: expected a positive number of ranks per node", o.node_size);
  TRIDENT_CHECK(o.top > 0, "--top={}: expected a positive number of rows", o.top);
  std::vector<std::string> notes;  // a preset against explicit keys (train/config/config.h)
  const train::Config config = train::load_config(o.config, o.overrides, &notes);
  for (const std::string& line : notes) fmt::print("{}\n", line);
  const models::TransformerSpec spec = train::planned_spec(config);
  train::Hardware h;
  // The FLOP rate: --flops-tflops, else train.peak_gflops, else this machine's matmul peak in the
  // run's precision on this machine's CPU (measured in a second, as training measures it for MFU).
  std::string flops_source = "--flops-tflops";
  if (o.flops_tflops > 0) {
    h.flops = o.flops_tflops * 1e12;
  } else if (config.train.peak_gflops > 0) {
    h.flops = config.train.peak_gflops * 1e9, flops_source = "train.peak_gflops";
  } else {
    h.flops = train::measured_peak_flops(config), flops_source = "measured on this machine";
  }
  h.link_bytes_per_s = o.link_gbps * 1e9 / 8;
  h.intra_bytes_per_s = o.intra_gbps * 1e9 / 8;
  h.node_size = o.node_size;
  const long double memory = o.memory_gb > 0 ? o.memory_gb * 1e9L : train::host_memory_bytes();
  const std::string limit =
      o.memory_gb > 0 ? fmt::format("--memory-gb={}", o.memory_gb) : std::string("this host's memory");
  fmt::print("{} per rank ({}), links {} Gb/s between nodes of {} ranks, {} Gb/s within\n", flop_rate(h.flops),
             flops_source, o.link_gbps, o.node_size, o.intra_gbps);
  if (o.ranks > 0 && !names_layout(config)) {
    const auto fits = train::search_layouts(config, spec, o.ranks, memory, h);
    // None that fits: the valid layouts whatever the memory say whether memory is the cause at all.
    const auto valid =
        fits.empty() ? train::search_layouts(config, spec, o.ranks, std::numeric_limits<long double>::infinity(), h)
                     : std::vector<train::LayoutCost>{};
    if (fits.empty() && valid.empty()) {
      // Say why, from data parallelism alone (the batch, usually), and give no advice about memory.
      train::MemoryLayout dp_only;
      dp_only.dp = o.ranks;
      std::string why = "no layout passes the checks training makes";
      try {
        train::validate_layout(train::with_layout(config, dp_only), o.ranks);
      } catch (const Error& e) {
        why = e.message();
      }
      TRIDENT_FAIL(
          "no layout of {} ranks is valid for this configuration, whatever the memory (data parallelism "
          "alone: {})",
          o.ranks, why);
    }
    const auto smallest = std::min_element(
        valid.begin(), valid.end(), [](const auto& a, const auto& b) { return a.memory.total() < b.memory.total(); });
    fmt::print("{}", train::format_search(config, fits, static_cast<std::size_t>(o.top), o.ranks, memory,
                                          valid.empty() ? nullptr : &*smallest));
    if (!fits.empty()) {
      fmt::print("\nthe fastest, in detail:\n{}",
                 train::format_plan(train::with_layout(config, fits.front().layout), spec, fits.front()));
    } else {
      std::fflush(stdout);
      fmt::print(stderr, "trident: plan: no layout of {} ranks fits {} ({} per rank)\n", o.ranks, limit,
                 train::format_bytes(memory));
      cli::exit_status() = kDoesNotFit;
    }
    return;
  }
  const int ranks = o.ranks > 0
                        ? o.ranks
                        : static_cast<int>(std::max<std::int64_t>(config.dist.data_parallel_size, 1) *
                                           config.dist.tensor_parallel_size * config.dist.pipeline_parallel_size *
                                           config.dist.context_parallel_size);
  train::validate_layout(config, ranks);
  spec.validate_tensor_parallel(static_cast<int>(config.dist.tensor_parallel_size));
  spec.validate_expert_parallel(static_cast<int>(config.dist.expert_parallel_size));
  spec.validate_context_parallel(static_cast<int>(config.dist.context_parallel_size),
                                 static_cast<int>(config.dist.tensor_parallel_size),
                                 config.dist.context_parallel_algorithm == "all_to_all");
  const train::LayoutCost cost = train::layout_cost(config, spec, train::memory_layout(config, ranks), h);
  fmt::print("{}", train::format_plan(config, spec, cost));
  if (cost.memory.total() > memory) {
    std::fflush(stdout);
    fmt::print(stderr, "trident: plan: does not fit: {} per rank is more than {} ({})\n",
               train::format_bytes(cost.memory.total()), limit, train::format_bytes(memory));
    cli::exit_status() = kDoesNotFit;
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand("plan",
                                 "Memory, communication and step time of a layout, before any work; with -n, "
                                 "the layouts that fit, fastest first");
  cmd->add_option("config", o->config, "TOML config file (see configs/)");
  cmd->add_option("--set", o->overrides, "Override a config key: section.key=value (repeatable)");
  CLI::Option* ranks = cmd->add_option("-n,--ranks", o->ranks,
                                       "Ranks of the job; without dist.* sizes in the config, search the layouts");
  cmd->add_option("--memory-gb", o->memory_gb, "Memory per rank in GB (10^9 bytes); default: this host's");
  cmd->add_option("--flops-tflops", o->flops_tflops,
                  "FLOP rate per rank in TFLOP/s; default: train.peak_gflops, else measured on this machine");
  cmd->add_option("--link-gbps", o->link_gbps, "Bandwidth between nodes per rank, Gb/s")->capture_default_str();
  cmd->add_option("--intra-node-gbps", o->intra_gbps, "Bandwidth within a node per rank, Gb/s")->capture_default_str();
  cmd->add_option("--node-size", o->node_size, "Ranks per node")->capture_default_str();
  cmd->add_option("--top", o->top, "Layouts listed by the search")->capture_default_str();
  cmd->footer("Exit status: 0 when the layout fits (with -n, when one does), 2 when it does not, 1 on an error.");
  cmd->callback([o, ranks] { run_plan(*o, ranks->count() > 0); });
}

}  // namespace trident::cli
