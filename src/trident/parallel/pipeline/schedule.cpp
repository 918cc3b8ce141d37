#include "trident/parallel/pipeline/schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "trident/core/error.h"

namespace trident::parallel::pipeline {

std::string_view op_name(Op op) {
  switch (op) {
    case Op::load: return "load";
    case Op::recv_forward: return "recv_forward";
    case Op::forward: return "forward";
    case Op::send_forward: return "send_forward";
    case Op::recv_backward: return "recv_backward";
    case Op::backward: return "backward";
    case Op::send_backward: return "send_backward";
    case Op::reduce: return "reduce";
    case Op::step: return "step";
  }
  return "?";
}

std::string to_string(const Instruction& i) {
  if (i.op == Op::reduce || i.op == Op::step) return std::string(op_name(i.op));
  if (i.op == Op::load) return fmt::format("load(mb={})", i.micro_batch);
  return fmt::format("{}(mb={}, chunk={})", op_name(i.op), i.micro_batch, i.chunk);
}

Schedule parse_schedule(const std::string& name) {
  if (name == "gpipe") return Schedule::gpipe;
  if (name == "1f1b") return Schedule::one_f_one_b;
  if (name == "interleaved") return Schedule::interleaved;
  TRIDENT_FAIL("dist.pipeline_schedule='{}' is not a pipeline schedule; use gpipe, 1f1b or interleaved", name);
}

std::string_view schedule_name(Schedule s) {
  switch (s) {
    case Schedule::gpipe: return "gpipe";
    case Schedule::one_f_one_b: return "1f1b";
    case Schedule::interleaved: return "interleaved";
  }
  return "?";
}

void validate(Schedule s, const ScheduleOptions& o) {
  TRIDENT_CHECK(o.stages >= 1, "dist.pipeline_parallel_size must be at least 1, got {}", o.stages);
  TRIDENT_CHECK(o.micro_batches >= 1, "a pipeline step needs at least one micro-batch, got {}", o.micro_batches);
  TRIDENT_CHECK(o.chunks >= 1, "dist.virtual_pipeline_size must be at least 1, got {}", o.chunks);
  if (s != Schedule::interleaved) {
    TRIDENT_CHECK(o.chunks == 1,
                  "dist.virtual_pipeline_size={} needs dist.pipeline_schedule='interleaved' (the {} schedule runs one "
                  "model chunk per rank)",
                  o.chunks, schedule_name(s));
    return;
  }
  TRIDENT_CHECK(o.chunks >= 2,
                "dist.pipeline_schedule='interleaved' needs dist.virtual_pipeline_size of at least 2 model chunks per "
                "rank, got {}; with one chunk use '1f1b'",
                o.chunks);
  if (o.micro_batches % o.stages != 0) {
    // Megatron's rule: forwards go in groups of p micro-batches per chunk.
    const int below = o.micro_batches / o.stages * o.stages, above = below + o.stages;
    const std::string fits = below > 0 ? fmt::format("{} or {}", below, above) : fmt::format("{}", above);
    TRIDENT_FAIL(
        "the interleaved pipeline schedule needs the number of micro-batches per step ({}) to be a multiple of "
        "dist.pipeline_parallel_size ({}); use {} micro-batches (train.global_batch_size / (train.micro_batch_size "
        "× data-parallel size)), or dist.pipeline_schedule='1f1b'",
        o.micro_batches, o.stages, fits);
  }
}

namespace {

// Appends the instructions of one forward or backward of (mb, chunk) on `rank`,
// with the loads and point-to-point transfers that belong to it.
class ListBuilder {
 public:
  ListBuilder(const ScheduleOptions& o, int rank)
      : p_(o.stages),
        rank_(rank),
        last_virtual_stage_(o.stages * o.chunks - 1),
        loads_(rank == 0 || rank == (o.stages * o.chunks - 1) % o.stages),
        loaded_(static_cast<std::size_t>(o.micro_batches), false) {}

  void forward(int mb, int chunk) {
    const int k = chunk * p_ + rank_;
    if (loads_ && !loaded_[static_cast<std::size_t>(mb)]) {
      loaded_[static_cast<std::size_t>(mb)] = true;
      list_.push_back({Op::load, mb, 0});
    }
    if (k > 0) list_.push_back({Op::recv_forward, mb, chunk});
    list_.push_back({Op::forward, mb, chunk});
    if (k < last_virtual_stage_) list_.push_back({Op::send_forward, mb, chunk});
  }

  void backward(int mb, int chunk) {
    const int k = chunk * p_ + rank_;
    if (k < last_virtual_stage_) list_.push_back({Op::recv_backward, mb, chunk});
    list_.push_back({Op::backward, mb, chunk});
    if (k > 0) list_.push_back({Op::send_backward, mb, chunk});
  }

  std::vector<Instruction> take() { return std::move(list_); }

  std::vector<Instruction> finish() {
    list_.push_back({Op::reduce, -1, 0});
    list_.push_back({Op::step, -1, 0});
    return std::move(list_);
  }

 private:
  int p_, rank_, last_virtual_stage_;
  bool loads_;  // hosts virtual stage 0 (rank 0) or the last one (rank p − 1)
  std::vector<bool> loaded_;
  std::vector<Instruction> list_;
};

}  // namespace

std::vector<Instruction> build(Schedule s, const ScheduleOptions& o, int rank) {
  validate(s, o);
  const int p = o.stages, m = o.micro_batches, v = o.chunks;
  TRIDENT_CHECK(rank >= 0 && rank < p, "pipeline rank {} is outside 0..{} (dist.pipeline_parallel_size = {})", rank,
                p - 1, p);
  ListBuilder b(o, rank);
  switch (s) {
    case Schedule::gpipe:
      for (int mb = 0; mb < m; ++mb) b.forward(mb, 0);
      for (int mb = 0; mb < m; ++mb) b.backward(mb, 0);
      break;
    case Schedule::one_f_one_b: {
      // Stage r runs ahead by the p − r − 1 forwards it takes for its first
      // micro-batch to come back as a gradient; then the oldest stashed
      // micro-batch is backwarded after every forward, so no more than p − r
      // are ever stashed.
      const int warmup = std::min(p - rank - 1, m);
      for (int mb = 0; mb < warmup; ++mb) b.forward(mb, 0);
      for (int i = 0; i < m - warmup; ++i) {
        b.forward(warmup + i, 0);
        b.backward(i, 0);
      }
      for (int mb = m - warmup; mb < m; ++mb) b.backward(mb, 0);
      break;
    }
    case Schedule::interleaved: {
      // Megatron's table: the k-th forward of this rank runs chunk (k mod p·v) / p
      // of micro-batch (k / p·v)·p + k mod p, i.e. groups of p micro-batches go
      // through chunk 0, then chunk 1, ...; the k-th backward walks the same
      // table with the chunks reversed. The warm-up covers the 2(p − r − 1)
      // hops a micro-batch's first gradient needs to come back, plus the
      // (v − 1)·p forwards of the deeper chunks of the first group.
      const int total = m * v, group = p * v;
      const auto micro_batch = [&](int k) { return k / group * p + k % p; };
      const auto forward_chunk = [&](int k) { return k % group / p; };
      const auto backward_chunk = [&](int k) { return v - 1 - k % group / p; };
      const int warmup = std::min((p - rank - 1) * 2 + (v - 1) * p, total);
      for (int k = 0; k < warmup; ++k) b.forward(micro_batch(k), forward_chunk(k));
      for (int k = 0; k < total - warmup; ++k) {
        b.forward(micro_batch(warmup + k), forward_chunk(warmup + k));
        b.backward(micro_batch(k), backward_chunk(k));
      }
      for (int k = total - warmup; k < total; ++k) b.backward(micro_batch(k), backward_chunk(k));
      break;
    }
  }
  return b.finish();
}

std::vector<Instruction> build_forward_only(const ScheduleOptions& o, int rank) {
  TRIDENT_CHECK(o.stages >= 1 && o.chunks >= 1 && o.micro_batches >= 1,
                "pipeline: forward-only list needs p, m, v >= 1 (got {}, {}, {})", o.stages, o.micro_batches, o.chunks);
  TRIDENT_CHECK(rank >= 0 && rank < o.stages, "pipeline rank {} is outside 0..{} (dist.pipeline_parallel_size = {})",
                rank, o.stages - 1, o.stages);
  ListBuilder b(o, rank);
  for (int mb = 0; mb < o.micro_batches; ++mb)
    for (int c = 0; c < o.chunks; ++c) b.forward(mb, c);
  return b.take();
}

}  // namespace trident::parallel::pipeline
