// Runs one rank's pipeline instruction list (schedule.h) with real tensors:
// the point-to-point transfers, the stash of activations between a
// micro-batch's forward and backward, and the backward itself. What a forward
// computes, where micro-batches come from and how gradients are reduced stay
// with the caller (the trainer), through three callbacks.
//
// Transfers go over the pipeline group (ranks ordered by stage). Every
// activation and activation gradient has the same shape and dtype, known
// ahead (`Boundary`: one micro-batch's hidden state), so receivers allocate
// before the data arrives and no shapes travel. Sends are non-blocking (kept
// until they complete; completed ones are reaped after every instruction and
// while backward runs, so MPI keeps moving them); receives block. That is the
// communication model the schedules are proved deadlock-free under.
//
// Messages are matched by tag = direction·V + sending virtual stage (V virtual
// stages in all); between two virtual stages the micro-batches of one
// direction always travel in increasing order, and MPI delivers messages of
// one (source, tag) in the order sent, so no micro-batch number is needed.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "trident/autograd/variable.h"
#include "trident/dist/communicator.h"
#include "trident/parallel/pipeline/schedule.h"

namespace trident::parallel::pipeline {

using autograd::Variable;

// What crosses a stage boundary: one micro-batch's hidden state.
struct Boundary {
  Shape shape;
  DType dtype = DType::f32;
  Device device = Device::cpu();  // where activations and their gradients live
};

struct StepCallbacks {
  // load(mb): fetch micro-batch mb (ranks hosting the first or last virtual stage).
  std::function<void(int mb)> load;
  // forward(mb, chunk, input): the chunk's forward on `input` (the received
  // activation — a leaf that requires grad when grad mode is on — or undefined
  // on virtual stage 0). Returns the activation to send on, or on the last
  // virtual stage the scalar to backpropagate (the loss, scaled as wanted).
  std::function<Variable(int mb, int chunk, const Variable& input)> forward;
  // side_loss(mb, chunk) (optional), right after forward(mb, chunk): a scalar that forward also produced
  // (a mixture of experts' auxiliary losses, scaled as wanted; undefined = none), backpropagated together
  // with the activation's gradient, so a stage's own losses need not travel down the pipeline.
  std::function<Variable(int mb, int chunk)> side_loss;
  // Called right before backward(mb, chunk) (optional): data parallelism uses
  // it to arm its gradient reduction for the step's last backward.
  std::function<void(int mb, int chunk)> before_backward;
  // reduce(): the gradient reductions after every backward of the step (optional).
  std::function<void()> reduce;
};

struct ExecutorStats {
  std::int64_t bytes_sent = 0;
  int peak_stashed = 0;  // (micro-batch, chunk) activations held between forward and backward
};

class Executor {
 public:
  // `group`: the pipeline-parallel group (rank = stage); `chunks`: model chunks per rank (v).
  Executor(std::shared_ptr<dist::Communicator> group, int chunks);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Walks `list` up to its end or its `step` instruction (the optimizer step is
  // the caller's), then waits for the sends still in flight. Throws
  // trident::Error naming the instruction when a forward returns a tensor of
  // the wrong shape or dtype, or when a transfer fails or times out.
  void run(const std::vector<Instruction>& list, const Boundary& boundary, const StepCallbacks& callbacks);

  const ExecutorStats& stats() const noexcept { return stats_; }

 private:
  struct Stashed {
    Variable input;   // the received activation (undefined on virtual stage 0)
    Variable output;  // what forward returned
    Variable side;    // StepCallbacks::side_loss's scalar (undefined: none)
  };
  struct PendingSend {
    Tensor data;
    std::unique_ptr<dist::Work> work;
  };
  int virtual_stage(int chunk) const noexcept { return chunk * p_ + rank_; }
  int tag(bool backward, int from_virtual_stage) const noexcept {
    return (backward ? p_ * v_ : 0) + from_virtual_stage;
  }
  void send(const Tensor& t, int to_rank, int tag);
  Tensor recv(const Boundary& b, int from_rank, int tag);
  void reap_sends();
  void check_boundary(const Tensor& t, const Boundary& b, const Instruction& i, const char* what) const;

  std::shared_ptr<dist::Communicator> group_;
  int p_, v_, rank_;
  std::map<std::pair<int, int>, Stashed> stash_;    // (mb, chunk)
  std::map<std::pair<int, int>, Tensor> received_;   // (mb, chunk) → received activation
  std::map<std::pair<int, int>, Tensor> grads_in_;   // (mb, chunk) → received output gradient
  std::map<int, std::deque<Tensor>> loopback_;       // tag → sends to this same rank (p = 1)
  std::vector<PendingSend> sends_;
  ExecutorStats stats_;
  int progress_hook_ = -1;
};

}  // namespace trident::parallel::pipeline
