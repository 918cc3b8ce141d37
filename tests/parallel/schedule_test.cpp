// Pipeline schedules without processes: all p stages' instruction lists run
// together in a simulator of the communication model (sends buffered, a recv
// blocks until its send was issued; forward = 1, backward = 2 time units per
// chunk, communication free). It proves that every combination completes,
// checks the data dependencies as it goes, and measures micro-batches in
// flight and the pipeline bubble against the formulas. Exact small lists are
// written out by hand; validate()'s messages are checked.
#include "trident/parallel/pipeline/schedule.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "trident/core/error.h"

namespace trident::parallel::pipeline {
namespace {

using List = std::vector<Instruction>;

std::string describe(Schedule s, const ScheduleOptions& o) {
  return fmt::format("{} p={} m={} v={}", schedule_name(s), o.stages, o.micro_batches, o.chunks);
}

struct SimResult {
  bool completed = false;
  std::string stuck;                    // one line per blocked rank and its next instruction
  std::vector<std::string> violations;  // broken data dependencies, unmatched sends, ...
  std::vector<int> peak_in_flight;      // per rank: (mb, chunk) forwarded and not yet backwarded
  int stages = 0;                       // p
  double makespan = 0;                  // time when the last rank finished its last backward
  double busy = 0;                      // forward + backward time over all ranks
  double idle_fraction() const { return 1.0 - busy / (stages * makespan); }
};

// Runs the p lists together. Each rank executes instructions in order until a
// recv finds no issued send; the ranks are swept until none can move. A rank's
// clock advances by the compute cost of forward/backward and jumps to the send
// time when a recv has to wait, so the timing does not depend on the sweep order.
SimResult simulate_lists(const std::vector<List>& lists, const ScheduleOptions& o, double forward_cost = 1.0,
                         double backward_cost = 2.0) {
  const int p = o.stages, m = o.micro_batches, v = o.chunks, stages = p * v;
  SimResult r;
  r.peak_in_flight.assign(static_cast<std::size_t>(p), 0);
  r.stages = p;
  auto violation = [&](int rank, const Instruction& i, const std::string& what) {
    r.violations.push_back(fmt::format("rank {} {}: {}", rank, to_string(i), what));
  };
  // Issued, not yet received sends: (backward?, mb, destination virtual stage) → (count, time issued).
  std::map<std::tuple<bool, int, int>, std::pair<int, double>> in_transit;
  // Per virtual stage and micro-batch: the end time of its forward / backward (-1: not yet).
  std::vector<std::vector<double>> fwd_end(static_cast<std::size_t>(stages), std::vector<double>(m, -1.0));
  std::vector<std::vector<double>> bwd_end = fwd_end;
  std::vector<std::set<std::pair<int, int>>> received_fwd(p), received_bwd(p);  // (mb, virtual stage)
  std::vector<std::set<int>> loaded(p);
  std::vector<std::size_t> pc(p, 0);
  std::vector<double> clock(p, 0.0);
  std::vector<int> in_flight(p, 0);
  std::vector<bool> reduced(p, false);

  // Executes rank's next instruction; false when it is a recv whose send was not issued.
  auto execute = [&](int rank) -> bool {
    const Instruction& i = lists[rank][pc[rank]];
    const int k = i.chunk * p + rank, mb = i.micro_batch;
    const bool compute_or_comm = i.op != Op::reduce && i.op != Op::step && i.op != Op::load;
    if (compute_or_comm && (i.chunk < 0 || i.chunk >= v || mb < 0 || mb >= m)) {
      violation(rank, i, "micro-batch or chunk out of range");
      return false;
    }
    double& t = clock[rank];
    // Takes the matching send if it was issued, waiting (in simulated time) for it.
    auto recv = [&](bool backward, std::set<std::pair<int, int>>& received) {
      const auto it = in_transit.find({backward, mb, k});
      if (it == in_transit.end()) return false;
      t = std::max(t, it->second.second);
      if (--it->second.first == 0) in_transit.erase(it);
      received.insert({mb, k});
      return true;
    };
    auto send = [&](bool backward, int to) {
      if (to < 0 || to >= stages) {
        violation(rank, i, "sends past the ends of the pipeline");
        return;
      }
      auto& slot = in_transit[{backward, mb, to}];
      if (slot.first > 0) violation(rank, i, "sent twice before it was received");
      slot = {slot.first + 1, t};
    };
    switch (i.op) {
      case Op::load:
        if (mb < 0 || mb >= m) violation(rank, i, "micro-batch out of range");
        if (rank != 0 && rank != (stages - 1) % p) violation(rank, i, "load on a rank without the first or last stage");
        if (!loaded[rank].insert(mb).second) violation(rank, i, "loaded twice");
        break;
      case Op::recv_forward:
        if (k == 0) violation(rank, i, "virtual stage 0 has nothing to receive");
        if (!recv(false, received_fwd[rank])) return false;
        break;
      case Op::recv_backward:
        if (k == stages - 1) violation(rank, i, "the last virtual stage has no gradient to receive");
        if (!recv(true, received_bwd[rank])) return false;
        break;
      case Op::forward:
        if (fwd_end[k][mb] >= 0) violation(rank, i, "forwarded twice");
        if (k > 0 && !received_fwd[rank].count({mb, k})) violation(rank, i, "forward without its input received");
        if (k > 0 && !(fwd_end[k - 1][mb] >= 0 && fwd_end[k - 1][mb] <= t)) {
          violation(rank, i, "runs before the forward of the previous virtual stage finished");
        }
        if ((k == 0 || k == stages - 1) && !loaded[rank].count(mb)) violation(rank, i, "forward before load");
        t += forward_cost;
        r.busy += forward_cost;
        fwd_end[k][mb] = t;
        r.peak_in_flight[rank] = std::max(r.peak_in_flight[rank], ++in_flight[rank]);
        break;
      case Op::backward:
        if (bwd_end[k][mb] >= 0) violation(rank, i, "backwarded twice");
        if (fwd_end[k][mb] < 0) violation(rank, i, "backward before its forward");
        if (k < stages - 1 && !received_bwd[rank].count({mb, k})) violation(rank, i, "backward without its gradient");
        if (k < stages - 1 && !(bwd_end[k + 1][mb] >= 0 && bwd_end[k + 1][mb] <= t)) {
          violation(rank, i, "runs before the backward of the next virtual stage finished");
        }
        t += backward_cost;
        r.busy += backward_cost;
        bwd_end[k][mb] = t;
        --in_flight[rank];
        r.makespan = std::max(r.makespan, t);
        break;
      case Op::send_forward:
        if (fwd_end[k][mb] < 0) violation(rank, i, "sends an activation not yet computed");
        // The peer the header promises: rank (r + 1) % p, chunk c (+1 when wrapping).
        if ((k + 1) % p != (rank + 1) % p || (k + 1) / p != i.chunk + (rank == p - 1 ? 1 : 0)) {
          violation(rank, i, "peer arithmetic");
        }
        send(false, k + 1);
        break;
      case Op::send_backward:
        if (bwd_end[k][mb] < 0) violation(rank, i, "sends a gradient not yet computed");
        send(true, k - 1);
        break;
      case Op::reduce:
        if (in_flight[rank] != 0) violation(rank, i, "reduces with micro-batches still in flight");
        for (int c = 0; c < v; ++c) {
          for (int b = 0; b < m; ++b) {
            if (bwd_end[c * p + rank][b] < 0) violation(rank, i, fmt::format("misses backward(mb={}, chunk={})", b, c));
          }
        }
        if (pc[rank] + 2 != lists[rank].size()) violation(rank, i, "is not second to last");
        reduced[rank] = true;
        break;
      case Op::step:
        if (!reduced[rank] || pc[rank] + 1 != lists[rank].size()) {
          violation(rank, i, "does not end the list after reduce");
        }
        break;
    }
    ++pc[rank];
    return true;
  };

  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < p; ++rank) {
      while (pc[rank] < lists[rank].size() && execute(rank)) progress = true;
    }
  }
  r.completed = true;
  for (int rank = 0; rank < p; ++rank) {
    if (pc[rank] < lists[rank].size()) {
      r.completed = false;
      r.stuck += fmt::format("rank {} blocked at #{} {}\n", rank, pc[rank], to_string(lists[rank][pc[rank]]));
    }
  }
  for (const auto& [key, value] : in_transit) {
    r.violations.push_back(fmt::format("{} send of mb={} to virtual stage {} never received",
                                       std::get<0>(key) ? "backward" : "forward", std::get<1>(key), std::get<2>(key)));
  }
  return r;
}

std::vector<List> build_all(Schedule s, const ScheduleOptions& o) {
  std::vector<List> lists;
  for (int rank = 0; rank < o.stages; ++rank) lists.push_back(build(s, o, rank));
  return lists;
}

SimResult simulate(Schedule s, const ScheduleOptions& o) { return simulate_lists(build_all(s, o), o); }

// Every schedule and size the tests sweep: p ∈ {1,2,3,4,8}, m ∈ 1..12, v ∈ {2,3} for interleaved (m % p == 0).
std::vector<std::pair<Schedule, ScheduleOptions>> sweep() {
  std::vector<std::pair<Schedule, ScheduleOptions>> cases;
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m = 1; m <= 12; ++m) {
      cases.push_back({Schedule::gpipe, {p, m, 1}});
      cases.push_back({Schedule::one_f_one_b, {p, m, 1}});
      if (m % p == 0) {
        for (int v : {2, 3}) cases.push_back({Schedule::interleaved, {p, m, v}});
      }
    }
  }
  return cases;
}

// Megatron's interleaved warm-up on stage r, capped at v·m.
int interleaved_warmup(const ScheduleOptions& o, int rank) {
  return std::min((o.stages - rank - 1) * 2 + (o.chunks - 1) * o.stages, o.chunks * o.micro_batches);
}

Instruction I(Op op, int mb = -1, int chunk = 0) { return {op, mb, chunk}; }

std::string show(const List& list) {
  std::string s;
  for (const auto& i : list) s += to_string(i) + "\n";
  return s;
}

TEST(PipelineSchedule, EveryCombinationCompletesWithoutDeadlockAndRespectsDependencies) {
  const auto cases = sweep();
  EXPECT_GT(cases.size(), 150u);
  for (const auto& [s, o] : cases) {
    const SimResult r = simulate(s, o);
    EXPECT_TRUE(r.completed) << describe(s, o) << " deadlocks:\n" << r.stuck;
    EXPECT_TRUE(r.violations.empty()) << describe(s, o) << ":\n" << fmt::format("{}", fmt::join(r.violations, "\n"));
  }
}

TEST(PipelineSchedule, SimulatorReportsADeadlockAndNamesTheStuckInstructions) {
  // Stage 0 waits for the gradient before sending the activation it depends on.
  const ScheduleOptions o{2, 1, 1};
  const List r0 = {I(Op::load, 0), I(Op::forward, 0), I(Op::recv_backward, 0), I(Op::send_forward, 0),
                   I(Op::backward, 0), I(Op::reduce), I(Op::step)};
  const List r1 = build(Schedule::one_f_one_b, o, 1);
  const SimResult r = simulate_lists({r0, r1}, o);
  EXPECT_FALSE(r.completed);
  EXPECT_NE(r.stuck.find("rank 0 blocked at #2 recv_backward(mb=0, chunk=0)"), std::string::npos) << r.stuck;
  EXPECT_NE(r.stuck.find("rank 1 blocked at #1 recv_forward(mb=0, chunk=0)"), std::string::npos) << r.stuck;
}

TEST(PipelineSchedule, SimulatorReportsBrokenDependenciesAndUnmatchedSends) {
  const ScheduleOptions o{2, 2, 1};
  const auto violations = [&](const List& r0, const List& r1) {
    const SimResult r = simulate_lists({r0, r1}, o);
    return fmt::format("{}", fmt::join(r.violations, "\n"));
  };
  const List good0 = build(Schedule::gpipe, o, 0), good1 = build(Schedule::gpipe, o, 1);
  EXPECT_EQ(violations(good0, good1), "");
  // Stage 0 receives mb 0's gradient but backwards mb 1 with it (and again later).
  List r0 = good0;
  std::replace(r0.begin(), r0.end(), I(Op::backward, 0), I(Op::backward, 1));
  std::string all = violations(r0, good1);
  EXPECT_NE(all.find("rank 0 backward(mb=1, chunk=0): backward without its gradient"), std::string::npos) << all;
  EXPECT_NE(all.find("rank 0 backward(mb=1, chunk=0): backwarded twice"), std::string::npos) << all;
  EXPECT_NE(all.find("rank 0 reduce: misses backward(mb=0, chunk=0)"), std::string::npos) << all;
  // Stage 0 never takes mb 1's gradient.
  r0 = good0;
  std::erase(r0, I(Op::recv_backward, 1));
  std::erase(r0, I(Op::backward, 1));
  all = violations(r0, good1);
  EXPECT_NE(all.find("backward send of mb=1 to virtual stage 0 never received"), std::string::npos) << all;
  // Stage 1 forwards mb 1 without receiving it.
  List r1 = good1;
  std::erase(r1, I(Op::recv_forward, 1));
  all = violations(good0, r1);
  EXPECT_NE(all.find("rank 1 forward(mb=1, chunk=0): forward without its input received"), std::string::npos) << all;
  EXPECT_NE(all.find("forward send of mb=1 to virtual stage 1 never received"), std::string::npos) << all;
}

TEST(PipelineSchedule, ListsHaveEachForwardAndBackwardOnceWithTheirTransfersAndLoads) {
  for (const auto& [s, o] : sweep()) {
    const int p = o.stages, m = o.micro_batches, v = o.chunks, last = p * v - 1;
    for (int rank = 0; rank < p; ++rank) {
      const List list = build(s, o, rank);
      SCOPED_TRACE(describe(s, o) + fmt::format(" rank {}", rank));
      ASSERT_GE(list.size(), 2u);
      EXPECT_EQ(list[list.size() - 2], I(Op::reduce));
      EXPECT_EQ(list.back(), I(Op::step));
      std::map<std::pair<int, int>, std::size_t> fwd_at, bwd_at;
      std::set<int> loads;
      for (std::size_t n = 0; n < list.size(); ++n) {
        const Instruction& i = list[n];
        const int k = i.chunk * p + rank;
        auto at = [&](std::size_t j) { return j < list.size() ? list[j] : I(Op::step); };
        if (i.op == Op::forward) {
          EXPECT_TRUE(fwd_at.emplace(std::pair{i.micro_batch, i.chunk}, n).second) << to_string(i);
          EXPECT_EQ(k > 0, n > 0 && at(n - 1) == I(Op::recv_forward, i.micro_batch, i.chunk)) << to_string(i);
          EXPECT_EQ(k < last, at(n + 1) == I(Op::send_forward, i.micro_batch, i.chunk)) << to_string(i);
        } else if (i.op == Op::backward) {
          EXPECT_TRUE(bwd_at.emplace(std::pair{i.micro_batch, i.chunk}, n).second) << to_string(i);
          EXPECT_EQ(k < last, n > 0 && at(n - 1) == I(Op::recv_backward, i.micro_batch, i.chunk)) << to_string(i);
          EXPECT_EQ(k > 0, at(n + 1) == I(Op::send_backward, i.micro_batch, i.chunk)) << to_string(i);
        } else if (i.op == Op::load) {
          EXPECT_TRUE(loads.insert(i.micro_batch).second) << to_string(i);
          // load(mb) opens the first forward of mb on this rank: [recv_forward] forward follows.
          const Instruction next = at(n + 1);
          EXPECT_TRUE(next.micro_batch == i.micro_batch && (next.op == Op::forward || next.op == Op::recv_forward));
          for (int c = 0; c < v; ++c) EXPECT_FALSE(fwd_at.count({i.micro_batch, c})) << "load after forward";
        } else if (i.op == Op::reduce || i.op == Op::step) {
          EXPECT_GE(n + 2, list.size()) << to_string(i) << " before the end";
        }
      }
      EXPECT_EQ(fwd_at.size(), static_cast<std::size_t>(m * v));
      EXPECT_EQ(bwd_at.size(), static_cast<std::size_t>(m * v));
      for (const auto& [key, n] : fwd_at) EXPECT_LT(n, bwd_at.at(key));
      const bool hosts_ends = rank == 0 || rank == last % p;
      EXPECT_EQ(loads.size(), hosts_ends ? static_cast<std::size_t>(m) : 0u);
    }
  }
}

TEST(PipelineSchedule, ForwardOnlyListsCompleteAndForwardEverythingOnce) {
  for (int p : {1, 2, 3, 4}) {
    for (int m = 1; m <= 6; ++m) {
      for (int v : {1, 2, 3}) {
        const ScheduleOptions o{p, m, v};
        std::vector<List> lists;
        for (int rank = 0; rank < p; ++rank) lists.push_back(build_forward_only(o, rank));
        const SimResult r = simulate_lists(lists, o);
        const std::string what = fmt::format("forward-only p={} m={} v={}", p, m, v);
        EXPECT_TRUE(r.completed) << what << " deadlocks:\n" << r.stuck;
        EXPECT_TRUE(r.violations.empty()) << what << ":\n" << fmt::format("{}", fmt::join(r.violations, "\n"));
        for (int rank = 0; rank < p; ++rank) {
          int forwards = 0;
          for (const Instruction& i : lists[rank]) {
            EXPECT_TRUE(i.op == Op::load || i.op == Op::recv_forward || i.op == Op::forward || i.op == Op::send_forward)
                << what << ": " << to_string(i);
            forwards += i.op == Op::forward;
          }
          EXPECT_EQ(forwards, m * v) << what;
        }
      }
    }
  }
  using enum Op;
  EXPECT_EQ(show(build_forward_only({2, 2, 1}, 1)),
            show({I(load, 0), I(recv_forward, 0), I(forward, 0), I(load, 1), I(recv_forward, 1), I(forward, 1)}));
}

TEST(PipelineSchedule, MicroBatchesInFlight) {
  for (const auto& [s, o] : sweep()) {
    const SimResult r = simulate(s, o);
    for (int rank = 0; rank < o.stages; ++rank) {
      const int peak = r.peak_in_flight[rank], p = o.stages, m = o.micro_batches;
      switch (s) {
        case Schedule::gpipe: EXPECT_EQ(peak, m) << describe(s, o) << " rank " << rank; break;
        case Schedule::one_f_one_b:
          EXPECT_LE(peak, p - rank) << describe(s, o) << " rank " << rank;
          EXPECT_EQ(peak, std::min(p - rank, m)) << describe(s, o) << " rank " << rank;
          break;
        case Schedule::interleaved:
          // The warm-up forwards plus the steady state's first forward (none when warm-up is everything).
          EXPECT_EQ(peak, std::min(interleaved_warmup(o, rank) + 1, o.chunks * m))
              << describe(s, o) << " rank " << rank;
          break;
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBTwoStagesThreeMicroBatchesByHand) {
  using enum Op;
  const ScheduleOptions o{2, 3, 1};
  const List rank0 = {I(load, 0), I(forward, 0), I(send_forward, 0),
                      I(load, 1), I(forward, 1), I(send_forward, 1), I(recv_backward, 0), I(backward, 0),
                      I(load, 2), I(forward, 2), I(send_forward, 2), I(recv_backward, 1), I(backward, 1),
                      I(recv_backward, 2), I(backward, 2),
                      I(reduce), I(step)};
  const List rank1 = {I(load, 0), I(recv_forward, 0), I(forward, 0), I(backward, 0), I(send_backward, 0),
                      I(load, 1), I(recv_forward, 1), I(forward, 1), I(backward, 1), I(send_backward, 1),
                      I(load, 2), I(recv_forward, 2), I(forward, 2), I(backward, 2), I(send_backward, 2),
                      I(reduce), I(step)};
  EXPECT_EQ(build(Schedule::one_f_one_b, o, 0), rank0) << show(build(Schedule::one_f_one_b, o, 0));
  EXPECT_EQ(build(Schedule::one_f_one_b, o, 1), rank1) << show(build(Schedule::one_f_one_b, o, 1));
}

TEST(PipelineSchedule, GPipeTwoStagesTwoMicroBatchesByHand) {
  using enum Op;
  const ScheduleOptions o{2, 2, 1};
  const List rank0 = {I(load, 0), I(forward, 0), I(send_forward, 0),
                      I(load, 1), I(forward, 1), I(send_forward, 1),
                      I(recv_backward, 0), I(backward, 0), I(recv_backward, 1), I(backward, 1),
                      I(reduce), I(step)};
  const List rank1 = {I(load, 0), I(recv_forward, 0), I(forward, 0),
                      I(load, 1), I(recv_forward, 1), I(forward, 1),
                      I(backward, 0), I(send_backward, 0), I(backward, 1), I(send_backward, 1),
                      I(reduce), I(step)};
  EXPECT_EQ(build(Schedule::gpipe, o, 0), rank0) << show(build(Schedule::gpipe, o, 0));
  EXPECT_EQ(build(Schedule::gpipe, o, 1), rank1) << show(build(Schedule::gpipe, o, 1));
}

TEST(PipelineSchedule, OneStageIsForwardBackwardPerMicroBatch) {
  using enum Op;
  const ScheduleOptions o{1, 2, 1};
  const List expected = {I(load, 0), I(forward, 0), I(backward, 0),
                         I(load, 1), I(forward, 1), I(backward, 1), I(reduce), I(step)};
  EXPECT_EQ(build(Schedule::one_f_one_b, o, 0), expected) << show(build(Schedule::one_f_one_b, o, 0));
}

TEST(PipelineSchedule, InterleavedTwoStagesTwoChunksTwoMicroBatchesByHand) {
  using enum Op;
  // Virtual stages: rank 0 holds 0 (chunk 0) and 2 (chunk 1), rank 1 holds 1 and 3 (the last).
  // Rank 0's warm-up 2 + 2 = 4 covers all v·m = 4 forwards; rank 1's is 0 + 2.
  const ScheduleOptions o{2, 2, 2};
  const List rank0 = {I(load, 0), I(forward, 0, 0), I(send_forward, 0, 0),
                      I(load, 1), I(forward, 1, 0), I(send_forward, 1, 0),
                      I(recv_forward, 0, 1), I(forward, 0, 1), I(send_forward, 0, 1),
                      I(recv_forward, 1, 1), I(forward, 1, 1), I(send_forward, 1, 1),
                      I(recv_backward, 0, 1), I(backward, 0, 1), I(send_backward, 0, 1),
                      I(recv_backward, 1, 1), I(backward, 1, 1), I(send_backward, 1, 1),
                      I(recv_backward, 0, 0), I(backward, 0, 0),
                      I(recv_backward, 1, 0), I(backward, 1, 0),
                      I(reduce), I(step)};
  const List rank1 = {I(load, 0), I(recv_forward, 0, 0), I(forward, 0, 0), I(send_forward, 0, 0),
                      I(load, 1), I(recv_forward, 1, 0), I(forward, 1, 0), I(send_forward, 1, 0),
                      I(recv_forward, 0, 1), I(forward, 0, 1), I(backward, 0, 1), I(send_backward, 0, 1),
                      I(recv_forward, 1, 1), I(forward, 1, 1), I(backward, 1, 1), I(send_backward, 1, 1),
                      I(recv_backward, 0, 0), I(backward, 0, 0), I(send_backward, 0, 0),
                      I(recv_backward, 1, 0), I(backward, 1, 0), I(send_backward, 1, 0),
                      I(reduce), I(step)};
  EXPECT_EQ(build(Schedule::interleaved, o, 0), rank0) << show(build(Schedule::interleaved, o, 0));
  EXPECT_EQ(build(Schedule::interleaved, o, 1), rank1) << show(build(Schedule::interleaved, o, 1));
}

TEST(PipelineSchedule, InterleavedForwardOrderIsMegatronsTable) {
  // p = 2, v = 2, m = 4: groups of p micro-batches through chunk 0 then chunk 1; backwards reverse the chunks.
  const ScheduleOptions o{2, 4, 2};
  std::vector<std::pair<int, int>> fwd, bwd;
  for (const auto& i : build(Schedule::interleaved, o, 1)) {
    if (i.op == Op::forward) fwd.push_back({i.micro_batch, i.chunk});
    if (i.op == Op::backward) bwd.push_back({i.micro_batch, i.chunk});
  }
  const std::vector<std::pair<int, int>> want_fwd = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 0}, {3, 0}, {2, 1}, {3, 1}};
  const std::vector<std::pair<int, int>> want_bwd = {{0, 1}, {1, 1}, {0, 0}, {1, 0}, {2, 1}, {3, 1}, {2, 0}, {3, 0}};
  EXPECT_EQ(fwd, want_fwd);
  EXPECT_EQ(bwd, want_bwd);
}

TEST(PipelineSchedule, BubbleMatchesTheFormulas) {
  // Unit time per chunk: forward 1, backward 2 (also 1 and 3: the formulas do not depend on the ratio),
  // communication free. A rank's work under interleaving is v chunks, so the idle fraction
  // 1 − busy / (p · makespan) compares with the bubble over v·m chunk-sized micro-batches: Megatron's
  // (p − 1)/(v·m) of ideal time, i.e. (p − 1)/(v·m + p − 1) of the step. With the warm-up as in Megatron
  // it is exact, not approximate.
  for (double backward : {2.0, 1.0, 3.0}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m = 1; m <= 12; ++m) {
        const ScheduleOptions o{p, m, 1};
        const double want = static_cast<double>(p - 1) / (m + p - 1);
        const SimResult g = simulate_lists(build_all(Schedule::gpipe, o), o, 1.0, backward);
        const SimResult f = simulate_lists(build_all(Schedule::one_f_one_b, o), o, 1.0, backward);
        EXPECT_NEAR(g.idle_fraction(), want, 1e-12) << "gpipe p=" << p << " m=" << m << " b=" << backward;
        EXPECT_NEAR(f.idle_fraction(), want, 1e-12) << "1f1b p=" << p << " m=" << m << " b=" << backward;
        EXPECT_DOUBLE_EQ(g.makespan, (1.0 + backward) * (m + p - 1));
        EXPECT_DOUBLE_EQ(f.makespan, (1.0 + backward) * (m + p - 1));
        if (m % p != 0) continue;
        for (int v : {2, 3}) {
          const ScheduleOptions oi{p, m, v};
          const SimResult i = simulate_lists(build_all(Schedule::interleaved, oi), oi, 1.0, backward);
          const double want_i = static_cast<double>(p - 1) / (v * m + p - 1);
          EXPECT_NEAR(i.idle_fraction(), want_i, 1e-12) << describe(Schedule::interleaved, oi) << " b=" << backward;
          if (p > 1) {
            EXPECT_LT(i.idle_fraction(), f.idle_fraction()) << describe(Schedule::interleaved, oi);
          }
        }
      }
    }
  }
}

TEST(PipelineSchedule, ValidateNamesTheOffendingSetting) {
  auto message = [](Schedule s, ScheduleOptions o) {
    try {
      validate(s, o);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(Schedule::one_f_one_b, {0, 4, 1}), "dist.pipeline_parallel_size must be at least 1, got 0");
  EXPECT_EQ(message(Schedule::gpipe, {2, 0, 1}), "a pipeline step needs at least one micro-batch, got 0");
  EXPECT_EQ(message(Schedule::interleaved, {2, 4, 0}), "dist.virtual_pipeline_size must be at least 1, got 0");
  EXPECT_EQ(message(Schedule::one_f_one_b, {2, 4, 2}),
            "dist.virtual_pipeline_size=2 needs dist.pipeline_schedule='interleaved' (the 1f1b schedule runs one "
            "model chunk per rank)");
  EXPECT_EQ(message(Schedule::interleaved, {2, 4, 1}),
            "dist.pipeline_schedule='interleaved' needs dist.virtual_pipeline_size of at least 2 model chunks per "
            "rank, got 1; with one chunk use '1f1b'");
  EXPECT_EQ(message(Schedule::interleaved, {4, 6, 2}),
            "the interleaved pipeline schedule needs the number of micro-batches per step (6) to be a multiple of "
            "dist.pipeline_parallel_size (4); use 4 or 8 micro-batches (train.global_batch_size / "
            "(train.micro_batch_size × data-parallel size)), or dist.pipeline_schedule='1f1b'");
  EXPECT_NE(message(Schedule::interleaved, {4, 3, 2}).find("(3) to be a multiple of dist.pipeline_parallel_size (4); "
                                                           "use 4 micro-batches"),
            std::string::npos);
  EXPECT_EQ(message(Schedule::interleaved, {4, 8, 2}), "no error");
  EXPECT_THROW(build(Schedule::interleaved, {4, 6, 2}, 0), Error);
  try {
    build(Schedule::gpipe, {2, 2, 1}, 2);
    FAIL() << "rank 2 of 2 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "pipeline rank 2 is outside 0..1 (dist.pipeline_parallel_size = 2)");
  }
}

TEST(PipelineSchedule, ParseSchedule) {
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved}) {
    EXPECT_EQ(parse_schedule(std::string(schedule_name(s))), s);
  }
  try {
    parse_schedule("1F1B-zero-bubble");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "dist.pipeline_schedule='1F1B-zero-bubble' is not a pipeline schedule; use gpipe, 1f1b or interleaved");
  }
  EXPECT_EQ(op_name(Op::send_backward), "send_backward");
  EXPECT_EQ(to_string(I(Op::recv_forward, 3, 1)), "recv_forward(mb=3, chunk=1)");
  EXPECT_EQ(to_string(I(Op::load, 2)), "load(mb=2)");
  EXPECT_EQ(to_string(I(Op::step)), "step");
}

}  // namespace
}  // namespace trident::parallel::pipeline
