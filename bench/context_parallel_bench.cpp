// Context parallelism (dist.context_parallel_size) in one run: a small GPT (2 blocks, d_model 64, 4 heads)
// trains one micro-batch of one long sequence per step under cp = 1, 2 and 4 (the cp ranks are the first
// ranks of the job; the others wait), and each rank reports the peak of the tensor allocator during the
// step beyond what it held before (the activations and the step's transients: what cp divides) and the
// step's wall time. Printed per sequence length: the peak per rank and its ratio to cp = 1 (about 1/cp
// is the goal), and the step time and its ratio to cp = 1.
//
//   mpirun -np 4 context_parallel_bench [--seq 8192,32768] [--reps 3] [--ring|--all-to-all]
//
// Each rank runs one thread: the ratios compare the same per-rank compute.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "trident/core/memory.h"
#include "trident/core/parallel.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/dist/self_communicator.h"
#include "trident/models/family.h"
#include "trident/train/parallel_model.h"

namespace {

using namespace trident;

struct Result {
  double peak_mib = 0;  // the step's peak beyond the bytes held before it, this rank
  double step_s = 0;    // median
};

// One cp layout on the first `cp` ranks of the world (the rest return {} after the split).
Result measure(const std::shared_ptr<dist::Communicator>& world, int cp, std::int64_t seq, int reps,
               bool all_to_all) {
  std::vector<int> members;
  for (int r = 0; r < cp; ++r) members.push_back(r);
  std::vector<int> rest;
  for (int r = cp; r < world->size(); ++r) rest.push_back(r);
  std::vector<std::vector<int>> groups{members};
  if (!rest.empty()) groups.push_back(rest);
  auto group = world->split(groups, fmt::format("cp{}", cp));
  if (world->rank() >= cp) return {};
  models::TransformerSpec spec = models::preset("gpt2-tiny");
  spec.max_seq_len = seq;
  spec.dropout = 0;
  train::ParallelModelOptions o;
  o.micro_batch_size = 1;
  o.seq_len = seq;
  o.seed = 1;
  auto comm = cp == 1 ? dist::self_communicator() : group;
  train::Layout layout;
  layout.cp = cp;
  o.context_all_to_all = all_to_all;
  train::ParallelModel model(spec, comm, layout, o);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(seq));
  for (std::int64_t i = 0; i < seq; ++i) ids[static_cast<std::size_t>(i)] = (i * 7 + 3) % spec.vocab_size;
  std::vector<std::int64_t> labels(ids.begin() + 1, ids.end());
  labels.push_back(-100);
  train::MicroBatch b{Tensor::from_vector(ids, {1, seq}), Tensor::from_vector(labels, {1, seq})};
  std::vector<double> times;
  double peak = 0;
  for (int i = 0; i <= reps; ++i) {  // the first step warms up
    model.zero_grad();
    const MemoryStats before = memory_stats(Device::cpu());
    reset_peak_memory(Device::cpu());
    const auto t0 = std::chrono::steady_clock::now();
    (void)model.forward_backward({b});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const MemoryStats after = memory_stats(Device::cpu());
    if (i > 0) times.push_back(s);
    peak = std::max(peak, static_cast<double>(after.peak - before.current) / (1 << 20));
  }
  std::sort(times.begin(), times.end());
  return {peak, times[times.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> seqs = {8192, 32768};
  int reps = 3;
  bool all_to_all = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seq" && i + 1 < argc) {
      seqs.clear();
      std::stringstream in(argv[++i]);
      for (std::string x; std::getline(in, x, ',');) seqs.push_back(std::atoll(x.c_str()));
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--all-to-all") {
      all_to_all = true;
    }
  }
  set_num_threads(1);
  auto world = dist::mpi_world(3600.0);
  const int n = world->size();
  if (world->rank() == 0) {
    fmt::print("context parallelism ({}): gpt2-tiny (2 blocks, d_model 64, 4 heads), one sequence per step, 1 "
               "thread per rank, {} ranks, median of {} steps\n",
               all_to_all ? "all-to-all" : "ring", n, reps);
    fmt::print("{:>8} {:>4} {:>16} {:>10} {:>10} {:>10}\n", "seq_len", "cp", "peak/rank MiB", "vs cp1", "step s",
               "vs cp1");
  }
  for (std::int64_t seq : seqs) {
    double base_peak = 0, base_step = 0;
    for (int cp = 1; cp <= n; cp *= 2) {
      const Result r = measure(world, cp, seq, reps, all_to_all);
      // Rank 0 reports; the cp ranks' peaks agree within a chunk's rounding (each holds 2 of 2·cp chunks).
      const double peak = world->all_reduce_scalar(world->rank() < cp ? r.peak_mib : 0, dist::ReduceOp::max);
      const double step = world->all_reduce_scalar(world->rank() == 0 ? r.step_s : 0, dist::ReduceOp::max);
      if (cp == 1) base_peak = peak, base_step = step;
      if (world->rank() == 0)
        fmt::print("{:>8} {:>4} {:>16.1f} {:>10.3f} {:>10.3f} {:>10.3f}\n", seq, cp, peak, peak / base_peak, step,
                   step / base_step);
    }
  }
  world.reset();
  dist::finalize();
  return 0;
}
