// Pipeline schedules on synthetic stages (run under mpirun; one rank = one stage):
//
//   mpirun -np 4 build/bin/pipeline_bench [--forward-ms 8] [--activation-kib 256] [--steps 5] [--chunks 2]
//                                         [--poll-ms 1]
//
// Each rank walks the instruction list of parallel/pipeline's schedule for its
// stage. forward = F ms, backward = 2F ms of synthetic compute (F/v and 2F/v per
// chunk under interleaving, so every schedule does the same work per step).
// The compute SLEEPS instead of spinning: with more ranks than cores a busy
// wait would take the core from the rank whose turn it is and measure the
// scheduler, not the schedule. While "computing" the rank polls its pending
// sends every --poll-ms (as a real executor's host thread does while the GPU
// works), so Open MPI's rendezvous transfers progress.
//
// Activations of a fixed size go over trident's Communicator: sends are
// non-blocking (their Work kept until the end of the step), recvs wait at once.
// Every forward stashes one activation buffer until its backward; the peak
// count per stage is printed (GPipe: m; 1F1B: p − r; interleaved: Megatron's
// warm-up + 1 (micro-batch, chunk) buffers, each 1/v of a stage's layers).
//
// Bubble, printed both ways (REFERENCE.md §3 quotes the first):
//   bubble / ideal = (wall − ideal) / ideal, theory (p − 1)/m, interleaved (p − 1)/(v·m)
//   idle fraction  = 1 − ideal / wall,       theory (p − 1)/(m + p − 1), interleaved (p − 1)/(v·m + p − 1)
// with ideal = m·3F (one stage's compute) and wall = the step's time on the slowest rank
// (from a barrier to its last send completing), median over --steps steps after one warm-up step.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "trident/core/error.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/parallel/pipeline/schedule.h"

using namespace trident;
namespace pp = trident::parallel::pipeline;
using Clock = std::chrono::steady_clock;

namespace {

struct BenchOptions {
  double forward_ms = 8.0;
  std::int64_t activation_kib = 256;
  int steps = 5;
  int chunks = 2;
  double poll_ms = 1.0;  // 0: no polling while computing
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
  TRIDENT_CHECK(o.forward_ms > 0 && o.activation_kib > 0 && o.steps > 0, "pipeline_bench: bad options");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct StepResult {
  double wall_s = 0;     // this rank: barrier exit → last send complete
  double compute_s = 0;  // this rank: time actually spent in synthetic compute (sleep overshoot included)
  int peak_stash = 0;    // activation buffers stashed at the peak
};

class Stage {
 public:
  Stage(std::shared_ptr<dist::Communicator> world, const BenchOptions& o) : world_(std::move(world)), o_(o) {}

  StepResult run(pp::Schedule s, const pp::ScheduleOptions& so) {
    const int p = so.stages, r = world_->rank(), v = so.chunks, m = so.micro_batches;
    const std::vector<pp::Instruction> list = pp::build(s, so, r);
    const std::int64_t elems = o_.activation_kib * 1024 / 4;
    const double fwd_ms = o_.forward_ms / v, bwd_ms = 2 * o_.forward_ms / v;
    // Tag of a transfer: direction, the sending virtual stage, the micro-batch.
    const auto tag = [&](bool backward, int sender_stage, int mb) {
      return ((backward ? p * v : 0) + sender_stage) * m + mb;
    };
    std::map<std::pair<int, int>, Tensor> stash;  // (mb, chunk) → its stashed activation
    std::vector<std::unique_ptr<dist::Work>> sends;
    StepResult res;
    world_->barrier();
    const auto t0 = Clock::now();
    for (const pp::Instruction& i : list) {
      const int k = i.chunk * p + r;
      switch (i.op) {
        case pp::Op::load:
        case pp::Op::reduce:
        case pp::Op::step: break;  // no data, no data parallelism, no optimizer
        case pp::Op::recv_forward: {
          Tensor x = Tensor::empty({elems});
          world_->recv(x, (r + p - 1) % p, tag(false, k - 1, i.micro_batch))->wait();
          break;
        }
        case pp::Op::recv_backward: {
          Tensor dy = Tensor::empty({elems});
          world_->recv(dy, (r + 1) % p, tag(true, k + 1, i.micro_batch))->wait();
          break;
        }
        case pp::Op::forward:
          res.compute_s += compute(fwd_ms, sends);
          stash.emplace(std::pair{i.micro_batch, i.chunk}, Tensor::full({elems}, 1.0));
          res.peak_stash = std::max(res.peak_stash, static_cast<int>(stash.size()));
          break;
        case pp::Op::backward:
          res.compute_s += compute(bwd_ms, sends);
          stash.erase({i.micro_batch, i.chunk});
          break;
        case pp::Op::send_forward:
          sends.push_back(
              world_->send(stash.at({i.micro_batch, i.chunk}), (r + 1) % p, tag(false, k, i.micro_batch)));
          break;
        case pp::Op::send_backward:
          sends.push_back(world_->send(Tensor::full({elems}, 2.0), (r + p - 1) % p, tag(true, k, i.micro_batch)));
          break;
      }
    }
    for (auto& w : sends) w->wait();
    res.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    return res;
  }

 private:
  // Sleeps `ms` (to a deadline, so the wake-ups of polling do not add up), polling pending sends.
  double compute(double ms, std::vector<std::unique_ptr<dist::Work>>& sends) const {
    const auto start = Clock::now();
    const auto to_duration = [](double milliseconds) {
      return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(milliseconds));
    };
    const auto deadline = start + to_duration(ms);
    const auto slice = o_.poll_ms > 0 ? to_duration(o_.poll_ms) : deadline - start;
    for (auto now = start; now < deadline; now = Clock::now()) {
      if (o_.poll_ms > 0) {
        for (auto& w : sends) w->test();
      }
      std::this_thread::sleep_until(std::min(deadline, now + slice));
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  std::shared_ptr<dist::Communicator> world_;
  BenchOptions o_;
};

// Every rank's value, in rank order (on every rank).
std::vector<double> gather(dist::Communicator& world, double value) {
  Tensor t = Tensor::zeros({world.size()}, DType::f64);
  t.span<double>()[static_cast<std::size_t>(world.rank())] = value;
  world.all_reduce_sync(t);
  return t.to_vector<double>();
}

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
    fmt::print("pipeline schedules, p = {} stages (one per rank); synthetic compute by SLEEPING: forward {} ms, "
               "backward {} ms per micro-batch per stage (interleaved: v = {} chunks of {:.2f} + {:.2f} ms); "
               "activations {} KiB f32 over Communicator send/recv; sends polled every {} ms while computing; "
               "median of {} steps\n",
               p, o.forward_ms, 2 * o.forward_ms, o.chunks, o.forward_ms / o.chunks, 2 * o.forward_ms / o.chunks,
               o.activation_kib, o.poll_ms, o.steps);
    fmt::print("wall = median step time; ideal = m·3F; bubble/ideal = wall/ideal − 1 against (p−1)/m, "
               "interleaved (p−1)/(v·m);\n"
               "idle fraction = 1 − ideal/wall against (p−1)/(m+p−1), interleaved (p−1)/(v·m+p−1);\n"
               "excess = wall − ideal·(1 + (p−1)/(v·m)): communication, wake-up latency and sleep overshoot;\n"
               "compute = the slowest rank's time in compute / ideal\n");
    fmt::print("{:<12} {:>3} {:>9} {:>9} {:>9} {:>8} {:>13} {:>8} {:>14} {:>8}\n", "schedule", "m", "wall ms",
               "ideal ms", "excess ms", "compute", "bubble/ideal", "theory", "idle fraction", "theory");
  }
  Stage stage(world, o);
  std::map<std::pair<std::string, int>, std::vector<double>> peaks;
  for (pp::Schedule s : {pp::Schedule::gpipe, pp::Schedule::one_f_one_b, pp::Schedule::interleaved}) {
    const bool il = s == pp::Schedule::interleaved;
    for (int m : {4, 8, 16}) {
      const pp::ScheduleOptions so{p, m, il ? o.chunks : 1};
      if (il && m % p != 0) {
        if (root) fmt::print("{:<12} {:>3}   skipped: m is not a multiple of p\n", pp::schedule_name(s), m);
        continue;
      }
      std::vector<double> walls, computes;
      int peak = 0;
      for (int step = 0; step <= o.steps; ++step) {
        const StepResult r = stage.run(s, so);
        const double wall = world->all_reduce_scalar(r.wall_s, dist::ReduceOp::max);
        const double compute = world->all_reduce_scalar(r.compute_s, dist::ReduceOp::max);
        peak = std::max(peak, r.peak_stash);
        if (step > 0) {
          walls.push_back(wall);
          computes.push_back(compute);
        }
      }
      peaks[{std::string(pp::schedule_name(s)), m}] = gather(*world, peak);
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
    fmt::print("\npeak activation buffers stashed per stage ({} KiB each; interleaved: per (micro-batch, chunk))\n",
               o.activation_kib);
    fmt::print("{:<12} {:>3}  {:<28} {}\n", "schedule", "m", "stage 0..p-1", "expected");
    for (const auto& [key, per_rank] : peaks) {
      std::string got, want;
      for (int r = 0; r < p; ++r) {
        got += fmt::format("{:>4}", per_rank[static_cast<std::size_t>(r)]);
        const int m = key.second, v = o.chunks;
        const int e = key.first == "gpipe"  ? m
                      : key.first == "1f1b" ? std::min(p - r, m)
                                            : std::min((p - r - 1) * 2 + (v - 1) * p + 1, v * m);
        want += fmt::format("{:>4}", e);
      }
      fmt::print("{:<12} {:>3}  {:<28} {}\n", key.first, key.second, got, want);
    }
  }
  world.reset();
  dist::finalize();
  return 0;
}
