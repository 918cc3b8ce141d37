// Pipeline schedules on synthetic stages, run by the real executor (under mpirun; one rank = one stage):
//
//   mpirun -np 4 build/bin/pipeline_bench [--forward-ms 8] [--activation-kib 256] [--steps 5] [--chunks 2]
//                                         [--poll-ms 1]
//
// Each rank builds a parallel::pipeline::Executor over the MPI world and runs
// the instruction list build(schedule, …) gives its stage, as the trainer does:
// the executor receives activations, calls forward, stashes what it returns,
// runs autograd backward from the received gradient and sends input gradients
// on. Only the model chunk is synthetic: one differentiable function,
// y = x + b (b a bias over the 256-float hidden dimension, so that virtual
// stage 0, whose input needs no gradient, still has something to backpropagate
// into), whose forward takes F/v ms and whose backward takes 2F/v ms (v = 1
// unless interleaved, so every schedule does the same work per step). y is
// charged to MemoryCategory::activations and saved for backward, as a layer
// saves what its backward reads, so trident's memory accounting sees one
// activation per (micro-batch, chunk) between its forward and its backward —
// on the last virtual stage too, where forward returns sum(y) and the executor
// stashes only that scalar.
//
// The compute SLEEPS instead of spinning: with more ranks than cores a busy
// wait would take the core from the rank whose turn it is and measure the
// scheduler, not the schedule. It sleeps to a deadline in slices of --poll-ms
// (0: one sleep; the name is kept from when this bench walked the lists itself
// and polled its sends there) and does nothing else in between: a stage cannot
// reach the executor's pending sends, which are reaped only between
// instructions and by the autograd progress hook after each backward node —
// here one node per chunk, so nothing progresses MPI during a forward or a
// backward. With Open MPI's vader and its CMA single-copy path that costs
// nothing measurable (the receiver pulls the data itself). With single copy
// off (OMPI_MCA_btl_vader_single_copy_mechanism=none) a sender must be inside
// MPI for its rendezvous transfer to move, and it matters: at p = 4 the step
// exceeds the theoretical wall by 10–200 ms instead of 2–12 ms, mostly from
// the forwards (bench/RESULTS.md).
//
// Printed per stage (rank) besides the bubble: the executor's
// stats().peak_stashed, and the peaks of trident's memory accounting during a
// step, in activation buffers: the activations category (what forwards
// produced: expected to equal the stash, GPipe m, 1F1B p − r, interleaved
// Megatron's warm-up + 1 (micro-batch, chunk) pieces of 1/v stage each), and
// every category together (adds the received inputs stashed beside them, the
// received gradients and the gradients waiting to be sent).
//
// Bubble, printed both ways (docs/parallelism.md#pipeline-schedules quotes the first):
//   bubble / ideal = (wall − ideal) / ideal, theory (p − 1)/m, interleaved (p − 1)/(v·m)
//   idle fraction  = 1 − ideal / wall,       theory (p − 1)/(m + p − 1), interleaved (p − 1)/(v·m + p − 1)
// with ideal = m·3F (one stage's compute) and wall = the step's time on the slowest rank
// (from a barrier to Executor::run's return, its sends complete), median over --steps steps
// after one warm-up step.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "trident/autograd/autograd.h"
#include "trident/core/error.h"
#include "trident/core/memory.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/reduce.h"
#include "trident/parallel/pipeline/executor.h"
#include "trident/parallel/pipeline/schedule.h"

using namespace trident;
namespace ag = trident::autograd;
namespace pp = trident::parallel::pipeline;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::int64_t kHidden = 256;  // f32 per activation row: one KiB

struct BenchOptions {
  double forward_ms = 8.0;
  std::int64_t activation_kib = 256;
  int steps = 5;
  int chunks = 2;
  double poll_ms = 1.0;  // length of the compute's sleep slices; 0: one sleep
};

BenchOptions parse(int argc, char** argv) {
  BenchOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    TRIDENT_CHECK(i + 1 < argc, "pipeline_bench: {} needs a value", a);
    const char* value = argv[++i];
    if (a == "--forward-ms") {
      o.forward_ms = std::atof(value);
    } else if (a == "--activation-kib") {
      o.activation_kib = std::atoll(value);
    } else if (a == "--steps") {
      o.steps = std::atoi(value);
    } else if (a == "--chunks") {
      o.chunks = std::atoi(value);
    } else if (a == "--poll-ms") {
      o.poll_ms = std::atof(value);
    } else {
      TRIDENT_FAIL("pipeline_bench: unknown option {} (--forward-ms, --activation-kib, --steps, --chunks, --poll-ms)",
                   a);
    }
  }
  TRIDENT_CHECK(o.forward_ms > 0 && o.activation_kib > 0 && o.steps > 0 && o.poll_ms >= 0,
                "pipeline_bench: bad options");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Sleeps until start + ms, in slices of at most slice_ms (0: at once), so the wake-ups do not add up.
void sleep_from(Clock::time_point start, double ms, double slice_ms) {
  const auto to_duration = [](double milliseconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(milliseconds));
  };
  const auto deadline = start + to_duration(ms);
  const auto slice = slice_ms > 0 ? to_duration(slice_ms) : deadline - start;
  for (auto now = Clock::now(); now < deadline; now = Clock::now()) {
    std::this_thread::sleep_until(std::min(deadline, now + slice));
  }
}

struct ComputeTiming {
  double forward_ms = 0;
  double backward_ms = 0;
  double slice_ms = 0;
  double* spent_s = nullptr;  // time spent in forward and backward is added here
};

// One model chunk, condensed: y = x + bias over [rows, kHidden], taking
// t.forward_ms; its backward (dx = dy, dbias = dy summed over rows) takes
// t.backward_ms. y is charged to the activations category and saved until
// backward, as a real layer's activations are.
ag::Variable synthetic_chunk(const ag::Variable& x, const ag::Variable& bias, const ComputeTiming& t) {
  const auto start = Clock::now();
  Tensor y;
  {
    MemoryCategoryScope scope(MemoryCategory::activations);
    y = ops::bias_add(x.data(), bias.data());
  }
  sleep_from(start, t.forward_ms, t.slice_ms);
  *t.spent_s += std::chrono::duration<double>(Clock::now() - start).count();
  // `saved` is held, not read: it stands for the activations a layer's backward reads.
  return ag::make_result(y, {x, bias}, "synthetic_chunk", [t, saved = y](const ag::GradContext& ctx) {
    const auto begin = Clock::now();
    std::vector<Tensor> grads{ctx.needs(0) ? ctx.grad() : Tensor(),
                              ctx.needs(1) ? ops::sum_to_last_dim(ctx.grad()) : Tensor()};
    sleep_from(begin, t.backward_ms, t.slice_ms);
    *t.spent_s += std::chrono::duration<double>(Clock::now() - begin).count();
    return grads;
  });
}

struct StepResult {
  double wall_s = 0;           // this rank: barrier exit → Executor::run returned
  double compute_s = 0;        // this rank: time in the chunks' forward and backward (sleep overshoot included)
  double activation_peak = 0;  // activations category above the step's start, in activation buffers
  double all_peak = 0;         // every category above the step's start, in activation buffers
};

class Stage {
 public:
  Stage(std::shared_ptr<dist::Communicator> world, const BenchOptions& o)
      : world_(std::move(world)), o_(o), boundary_{Shape{o.activation_kib, kHidden}, DType::f32} {
    for (int c = 0; c < o.chunks; ++c) bias_.emplace_back(Tensor::zeros({kHidden}), true);
  }

  // One optimizer step's list (without the step) through `executor`.
  StepResult run(pp::Executor& executor, pp::Schedule s, const pp::ScheduleOptions& so) {
    const int last = so.stages * so.chunks - 1, r = world_->rank(), p = so.stages;
    const std::vector<pp::Instruction> list = pp::build(s, so, r);
    StepResult res;
    const ComputeTiming timing{o_.forward_ms / so.chunks, 2 * o_.forward_ms / so.chunks, o_.poll_ms, &res.compute_s};
    pp::StepCallbacks cb;
    cb.forward = [&](int mb, int chunk, const ag::Variable& input) {
      // Virtual stage 0 makes its micro-batch's input (an embedding's output would be there).
      const ag::Variable x = input.defined() ? input : ag::Variable(Tensor::full(boundary_.shape, mb));
      ag::Variable y = synthetic_chunk(x, bias_[static_cast<std::size_t>(chunk)], timing);
      return chunk * p + r == last ? ag::sum(y) : y;
    };
    const Device cpu = Device::cpu();
    const auto slot = static_cast<std::size_t>(MemoryCategory::activations);
    const double buffer =
        static_cast<double>(boundary_.shape.numel()) * static_cast<double>(dtype_size(boundary_.dtype));
    world_->barrier();
    reset_peak_memory(cpu);
    const MemoryStats before = memory_stats(cpu);
    const auto t0 = Clock::now();
    executor.run(list, boundary_, cb);
    res.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const MemoryStats after = memory_stats(cpu);
    res.activation_peak = static_cast<double>(after.peak_by_category[slot] - before.current_by_category[slot]) / buffer;
    res.all_peak = static_cast<double>(after.peak - before.current) / buffer;
    return res;
  }

 private:
  std::shared_ptr<dist::Communicator> world_;
  BenchOptions o_;
  pp::Boundary boundary_;
  std::vector<ag::Variable> bias_;  // one per model chunk
};

// Every rank's value, in rank order (on every rank).
std::vector<double> gather(dist::Communicator& world, double value) {
  Tensor t = Tensor::zeros({world.size()}, DType::f64);
  t.span<double>()[static_cast<std::size_t>(world.rank())] = value;
  world.all_reduce_sync(t);
  return t.to_vector<double>();
}

struct PeakRow {
  std::string schedule;
  int m = 0;
  std::vector<double> stashed, activations, all;
};

}  // namespace

int main(int argc, char** argv) {
  const BenchOptions o = parse(argc, argv);
  auto world = dist::mpi_world(600.0);
  const int p = world->size();
  const bool root = world->rank() == 0;
  if (p < 2) {
    if (root) fmt::print("pipeline_bench needs at least 2 ranks (mpirun -np 2 or more)\n");
    world.reset();
    dist::finalize();
    return 0;
  }
  if (root) {
    fmt::print(
        "pipeline schedules, p = {} stages (one per rank) run by pipeline::Executor; synthetic chunks SLEEP: "
        "forward {} ms, backward {} ms per micro-batch per stage (interleaved: v = {} chunks of {:.2f} + "
        "{:.2f} ms), in slices of {} ms; activations [{}, {}] f32 ({} KiB); median of {} steps\n",
        p, o.forward_ms, 2 * o.forward_ms, o.chunks, o.forward_ms / o.chunks, 2 * o.forward_ms / o.chunks, o.poll_ms,
        o.activation_kib, kHidden, o.activation_kib, o.steps);
    fmt::print(
        "wall = median step time; ideal = m·3F; bubble/ideal = wall/ideal − 1 against (p−1)/m, "
        "interleaved (p−1)/(v·m);\n"
        "idle fraction = 1 − ideal/wall against (p−1)/(m+p−1), interleaved (p−1)/(v·m+p−1);\n"
        "excess = wall − ideal·(1 + (p−1)/(v·m)): communication, wake-up latency and sleep overshoot;\n"
        "compute = the slowest rank's time in compute / ideal\n");
    fmt::print("{:<12} {:>3} {:>9} {:>9} {:>9} {:>8} {:>13} {:>8} {:>14} {:>8}\n", "schedule", "m", "wall ms",
               "ideal ms", "excess ms", "compute", "bubble/ideal", "theory", "idle fraction", "theory");
  }
  Stage stage(world, o);
  std::vector<PeakRow> peaks;
  for (pp::Schedule s : {pp::Schedule::gpipe, pp::Schedule::one_f_one_b, pp::Schedule::interleaved}) {
    const bool il = s == pp::Schedule::interleaved;
    for (int m : {4, 8, 16}) {
      const pp::ScheduleOptions so{p, m, il ? o.chunks : 1};
      if (il && m % p != 0) {
        if (root) fmt::print("{:<12} {:>3}   skipped: m is not a multiple of p\n", pp::schedule_name(s), m);
        continue;
      }
      pp::Executor executor(world, so.chunks);  // a fresh one: its peak_stashed covers this schedule only
      std::vector<double> walls, computes;
      double activation_peak = 0, all_peak = 0;
      for (int step = 0; step <= o.steps; ++step) {
        const StepResult r = stage.run(executor, s, so);
        const double wall = world->all_reduce_scalar(r.wall_s, dist::ReduceOp::max);
        const double compute = world->all_reduce_scalar(r.compute_s, dist::ReduceOp::max);
        activation_peak = std::max(activation_peak, r.activation_peak);
        all_peak = std::max(all_peak, r.all_peak);
        if (step > 0) {
          walls.push_back(wall);
          computes.push_back(compute);
        }
      }
      peaks.push_back({std::string(pp::schedule_name(s)), m, gather(*world, executor.stats().peak_stashed),
                       gather(*world, activation_peak), gather(*world, all_peak)});
      const double wall = median(walls), ideal = m * 3 * o.forward_ms / 1e3;
      const double vm = static_cast<double>(so.chunks) * m;
      const double th_ratio = (p - 1) / vm, th_idle = (p - 1) / (vm + p - 1);
      const double idle = 1 - ideal / wall;
      if (root) {
        fmt::print("{:<12} {:>3} {:>9.1f} {:>9.1f} {:>9.1f} {:>7.3f}x {:>13.3f} {:>8.3f} {:>14.3f} {:>8.3f}\n",
                   pp::schedule_name(s), m, wall * 1e3, ideal * 1e3, (wall - ideal * (1 + th_ratio)) * 1e3,
                   median(computes) / ideal, wall / ideal - 1, th_ratio, idle, th_idle);
      }
    }
  }
  if (root) {
    fmt::print(
        "\npeaks per stage 0..p-1 (interleaved: per (micro-batch, chunk)): stashed = the executor's "
        "peak_stashed; activations, all = trident's memory accounting during a step (activations category; "
        "every category), in {} KiB buffers; expected = the stash of the schedule\n",
        o.activation_kib);
    const int w = 4 * p + 2, wf = 6 * p + 2;
    fmt::print("{:<12} {:>3}  {:<{}}{:<{}}{:<{}}{}\n", "schedule", "m", "stashed", w, "activations", wf, "all", wf,
               "expected");
    for (const PeakRow& row : peaks) {
      std::string stashed, activations, all, want;
      for (int r = 0; r < p; ++r) {
        const auto i = static_cast<std::size_t>(r);
        stashed += fmt::format("{:>4}", row.stashed[i]);
        activations += fmt::format("{:>6.1f}", row.activations[i]);
        all += fmt::format("{:>6.1f}", row.all[i]);
        const int m = row.m, v = o.chunks;
        const int e = row.schedule == "gpipe"  ? m
                      : row.schedule == "1f1b" ? std::min(p - r, m)
                                               : std::min((p - r - 1) * 2 + (v - 1) * p + 1, v * m);
        want += fmt::format("{:>4}", e);
      }
      fmt::print("{:<12} {:>3}  {:<{}}{:<{}}{:<{}}{}\n", row.schedule, row.m, stashed, w, activations, wf, all, wf,
                 want);
    }
  }
  world.reset();
  dist::finalize();
  return 0;
}
