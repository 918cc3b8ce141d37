// Pipeline schedules as pure functions (docs/parallelism.md#pipeline-schedules): for one optimizer
// step, the ordered list of instructions each pipeline stage executes. No
// communication happens here; an executor walks the list.
//
// Notation: p stages (ranks of the pipeline group), m micro-batches per step,
// v model chunks per rank. Chunk c on rank r is virtual stage c·p + r; there
// are v·p virtual stages, virtual stage 0 holds the embedding, the last one the
// head and the loss. Non-interleaved schedules have v = 1 (chunk is always 0).
//
// What an executor may rely on, for every list build() returns:
// - load(mb) fetches micro-batch mb's tokens and labels. It appears once per
//   micro-batch, before that micro-batch's first forward on this rank, and only
//   on ranks that host virtual stage 0 or the last virtual stage.
// - A forward of (mb, c) is [load(mb)] [recv_forward(mb, c)] forward(mb, c)
//   [send_forward(mb, c)]: the recv is absent on virtual stage 0, the send on
//   the last virtual stage. A backward is [recv_backward(mb, c)] backward(mb, c)
//   [send_backward(mb, c)]: the recv is absent on the last virtual stage, the
//   send on virtual stage 0. Forward traffic of virtual stage k goes to k + 1
//   (rank (r + 1) % p; chunk c, or c + 1 when wrapping from rank p − 1 to 0),
//   backward traffic to k − 1.
// - Communication model: sends are non-blocking (buffered; the sender moves on
//   at once and completes them by the end of the step), a recv blocks until the
//   matching send has been issued. Every send has exactly one matching recv
//   (same micro-batch, adjacent virtual stages, same direction). Under this
//   model the p lists together never deadlock.
// - Every (mb, c) is forwarded once and backwarded once, backward after
//   forward. The list ends with reduce (gradient reduction over data
//   parallelism and the embedding group) and step (the optimizer).
//
// Schedules:
// - gpipe: m forwards, then m backwards (both in micro-batch order); all m
//   micro-batches' activations live at the peak.
// - one_f_one_b (PipeDream-flush, Megatron's non-interleaved 1F1B): warm-up of
//   min(p − r − 1, m) forwards, then one forward / one backward, then the
//   remaining backwards; at most min(p − r, m) micro-batches in flight.
// - interleaved (Megatron's interleaved 1F1B): forwards in groups of p
//   micro-batches, chunk 0..v−1 for each group; the k-th backward takes the
//   same table entry with chunk ↦ v − 1 − chunk. Warm-up of
//   min((p − r − 1)·2 + (v − 1)·p, v·m) forwards. Needs m divisible by p.
//   The bubble shrinks by about v at the price of v times the p2p traffic.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trident::parallel::pipeline {

enum class Op { load, recv_forward, forward, send_forward, recv_backward, backward, send_backward, reduce, step };
std::string_view op_name(Op op);

struct Instruction {
  Op op;
  int micro_batch = -1;  // -1 for reduce/step
  int chunk = 0;         // model chunk on this rank (interleaved: 0..v-1), virtual stage = chunk * p + rank;
                         // 0 for load, reduce and step
  friend bool operator==(const Instruction&, const Instruction&) = default;
};
// "forward(mb=3, chunk=1)", "reduce" — for logs and error messages.
std::string to_string(const Instruction& instruction);

enum class Schedule { gpipe, one_f_one_b, interleaved };
// "gpipe" | "1f1b" | "interleaved"; anything else throws an error naming dist.pipeline_schedule.
Schedule parse_schedule(const std::string& name);
// The inverse of parse_schedule.
std::string_view schedule_name(Schedule s);

struct ScheduleOptions {
  int stages = 1;         // p: dist.pipeline_parallel_size
  int micro_batches = 1;  // m: micro-batches per optimizer step on this pipeline
  int chunks = 1;         // v: dist.virtual_pipeline_size (model chunks per rank)
};

// Throws trident::Error with a message naming the offending setting for p < 1,
// m < 1, v < 1, v > 1 with a non-interleaved schedule, interleaved with v < 2,
// and interleaved with m not a multiple of p.
void validate(Schedule s, const ScheduleOptions& o);

// The ordered instruction list of stage `rank` (0..p-1) for one optimizer step.
// Validates the options first.
std::vector<Instruction> build(Schedule s, const ScheduleOptions& o, int rank);

// Forward only (evaluation): every (mb, chunk) of this rank in (micro-batch,
// chunk) order with its load and transfers — no backward, reduce or step. Any
// schedule's chunking gives the same list, and it cannot deadlock: each
// forward waits only on forwards earlier in that order. No divisibility rule
// applies to m.
std::vector<Instruction> build_forward_only(const ScheduleOptions& o, int rank);

}  // namespace trident::parallel::pipeline
