// Data-parallel gradient synchronisation (ZeRO stage 0, Megatron's DDP).
//
// Every parameter's gradient lives in one contiguous buffer, laid out in the
// order backward produces them (last layers first) and cut into buckets of
// about `bucket_mb`. Parameters keep views into the buffer as their .grad, so
// autograd accumulates micro-batch gradients in place. On the last
// micro-batch of a step, each parameter's gradient-ready hook counts down its
// bucket; a full bucket launches a non-blocking all-reduce (sum) while
// backward continues on earlier layers. finish() launches what is left and
// waits for everything.
//
// The sum (not the mean) is right because each rank's loss is already divided
// by the global batch's token count (docs/numerics.md#global-batch-semantics-and-the-loss).
#pragma once

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "trident/dist/communicator.h"
#include "trident/nn/module.h"

namespace trident::parallel {

struct GradSyncOptions {
  double bucket_mb = 25.0;  // bucket size in MiB of gradient
  bool overlap = true;      // launch buckets from backward hooks (else all in finish())
};

struct GradSyncStats {
  std::int64_t buckets = 0;
  double backward_seconds = 0;  // first bucket launch → end of backward
  double exposed_seconds = 0;   // time finish() spent waiting (communication not hidden)
  std::int64_t bytes = 0;       // gradient bytes all-reduced per step
};

// Parameters replicated over one group of ranks (the data-parallel group; under expert parallelism the
// experts' expert-data-parallel group).
struct GradGroup {
  std::vector<nn::Parameter*> params;
  std::shared_ptr<dist::Communicator> group;
};

// Which ranks: every rank of each group constructs it over the same parameters (same order, same
// shapes) and calls begin_micro_batch and finish at the same micro-batches; the all-reduces they launch are
// collective over the group. Ownership: it borrows the parameters (they must outlive it) and shares the
// communicators.
class GradSync {
 public:
  GradSync(std::vector<nn::Parameter*> params, std::shared_ptr<dist::Communicator> dp, GradSyncOptions options);
  // Several groups: each bucket holds one group's parameters and is reduced over that group (a group of
  // one rank is not reduced). Every rank of a group must list the same parameters in the same order.
  GradSync(std::vector<GradGroup> groups, GradSyncOptions options);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Zeroes the gradients (lazily: see Variable::zero_grad; the parameters'
  // .grad views stay installed).
  void zero_grad();
  // Call before each micro-batch's backward; reductions are launched only when `last` is true.
  void begin_micro_batch(bool last);
  // After the last micro-batch's backward: launch remaining buckets, wait for all.
  void finish();

  const GradSyncStats& stats() const noexcept { return stats_; }
  std::size_t bucket_count() const noexcept { return buckets_.size(); }

 private:
  struct Bucket {
    std::int64_t begin = 0, end = 0;  // element range in the buffer
    int params = 0;
    int pending = 0;
    std::unique_ptr<dist::Work> work;
    bool launched = false;
    std::vector<nn::Parameter*> members;
    dist::Communicator* group = nullptr;
  };
  void launch(Bucket& b);

  std::vector<std::shared_ptr<dist::Communicator>> groups_;
  GradSyncOptions options_;
  Tensor buffer_;
  std::vector<Bucket> buckets_;
  bool sync_ = false;
  std::chrono::steady_clock::time_point first_launch_;
  bool any_launched_ = false;
  GradSyncStats stats_;
  int progress_hook_ = -1;
  std::vector<std::pair<autograd::Variable, int>> hooks_;  // each parameter's grad-ready hook
};

}  // namespace trident::parallel
