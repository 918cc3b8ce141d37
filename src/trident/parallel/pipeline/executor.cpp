#include "trident/parallel/pipeline/executor.h"

#include <algorithm>

#include "trident/autograd/autograd.h"
#include "trident/core/error.h"

namespace trident::parallel::pipeline {

Executor::Executor(std::shared_ptr<dist::Communicator> group, int chunks)
    : group_(std::move(group)), p_(group_->size()), v_(chunks), rank_(group_->rank()) {
  TRIDENT_CHECK(v_ >= 1, "pipeline executor: {} model chunks per rank", v_);
  // Backward of a long stage would otherwise leave MPI's rendezvous sends unprogressed.
  progress_hook_ = autograd::add_backward_progress_hook([this] {
    if (!sends_.empty()) reap_sends();
  });
}

Executor::~Executor() {
  autograd::remove_backward_progress_hook(progress_hook_);
  for (PendingSend& s : sends_) {
    try {
      s.work->wait();
    } catch (...) {  // the step already failed; nothing more to report from a destructor
    }
  }
}

void Executor::send(const Tensor& t, int to_rank, int tag) {
  stats_.bytes_sent += static_cast<std::int64_t>(t.nbytes());
  if (to_rank == rank_) {  // one stage with several chunks: the next virtual stage is here
    loopback_[tag].push_back(t);
    return;
  }
  PendingSend s{t, nullptr};
  s.work = group_->send(s.data, to_rank, tag);
  sends_.push_back(std::move(s));
}

Tensor Executor::recv(const Boundary& b, int from_rank, int tag) {
  if (from_rank == rank_) {
    auto& queue = loopback_[tag];
    TRIDENT_CHECK(!queue.empty(), "pipeline executor: nothing was sent to this rank with tag {}", tag);
    Tensor t = queue.front();
    queue.pop_front();
    return t;
  }
  Tensor t = Tensor::empty(b.shape, b.dtype, b.device);
  group_->recv(t, from_rank, tag)->wait();
  return t;
}

void Executor::reap_sends() {
  std::erase_if(sends_, [](PendingSend& s) {
    if (!s.work->test()) return false;
    s.work->wait();  // completed: returns at once, or throws the failure
    return true;
  });
}

void Executor::check_boundary(const Tensor& t, const Boundary& b, const Instruction& i, const char* what) const {
  TRIDENT_CHECK(t.defined() && t.shape() == b.shape && t.dtype() == b.dtype,
                "pipeline {} on virtual stage {} (rank {} of the pipeline): {} is {} but stage boundaries carry {} {}",
                to_string(i), virtual_stage(i.chunk), rank_, what,
                t.defined() ? t.describe() : std::string("undefined"), b.shape, b.dtype);
}

void Executor::run(const std::vector<Instruction>& list, const Boundary& boundary, const StepCallbacks& cb) {
  TRIDENT_CHECK(cb.forward, "pipeline executor: no forward callback");
  const int last = p_ * v_ - 1;
  const int next_rank = (rank_ + 1) % p_, prev_rank = (rank_ + p_ - 1) % p_;
  const bool grad = autograd::grad_enabled();
  std::map<std::pair<int, int>, Tensor> grads_out;  // input gradients waiting for send_backward
  for (const Instruction& i : list) {
    if (i.op == Op::step) break;
    const std::pair<int, int> key{i.micro_batch, i.chunk};
    const int k = virtual_stage(i.chunk);
    switch (i.op) {
      case Op::load:
        if (cb.load) cb.load(i.micro_batch);
        break;
      case Op::recv_forward:
        received_[key] = recv(boundary, prev_rank, tag(false, k - 1));
        break;
      case Op::forward: {
        Variable input;
        if (k > 0) {
          auto it = received_.find(key);
          TRIDENT_CHECK(it != received_.end(), "pipeline {}: its input was never received", to_string(i));
          input = Variable(it->second, grad);
          received_.erase(it);
        }
        Variable output = cb.forward(i.micro_batch, i.chunk, input);
        if (k < last) check_boundary(output.data(), boundary, i, "the activation");
        if (grad || k < last) {
          Variable side = cb.side_loss ? cb.side_loss(i.micro_batch, i.chunk) : Variable();
          if (side.defined() && !side.requires_grad()) side = Variable();  // no graph to run (evaluation)
          stash_[key] = Stashed{input, output, side};
          stats_.peak_stashed = std::max(stats_.peak_stashed, static_cast<int>(stash_.size()));
        }
        break;
      }
      case Op::send_forward: {
        auto it = stash_.find(key);
        TRIDENT_CHECK(it != stash_.end(), "pipeline {}: nothing was computed to send", to_string(i));
        send(it->second.output.data(), next_rank, tag(false, k));
        if (!grad) stash_.erase(it);
        break;
      }
      case Op::recv_backward:
        grads_in_[key] = recv(boundary, next_rank, tag(true, k + 1));
        break;
      case Op::backward: {
        auto it = stash_.find(key);
        TRIDENT_CHECK(it != stash_.end(), "pipeline {}: no stashed forward", to_string(i));
        const Stashed s = std::move(it->second);
        stash_.erase(it);
        if (cb.before_backward) cb.before_backward(i.micro_batch, i.chunk);
        std::vector<Variable> roots{s.output};
        std::vector<Tensor> seeds{Tensor()};  // the last stage's loss: a scalar, seeded with 1
        if (k != last) {
          auto g = grads_in_.find(key);
          TRIDENT_CHECK(g != grads_in_.end(), "pipeline {}: its output gradient was never received", to_string(i));
          check_boundary(g->second, boundary, i, "the received gradient");
          seeds[0] = g->second;
          grads_in_.erase(g);
        }
        if (s.side.defined()) {
          roots.push_back(s.side);
          seeds.emplace_back();
        }
        autograd::backward(roots, seeds);
        if (k > 0) {
          Tensor g = s.input.grad();
          grads_out[key] = g.defined() ? g : Tensor::zeros(boundary.shape, boundary.dtype, boundary.device);
        }
        break;
      }
      case Op::send_backward: {
        auto it = grads_out.find(key);
        TRIDENT_CHECK(it != grads_out.end(), "pipeline {}: no input gradient to send", to_string(i));
        check_boundary(it->second, boundary, i, "the input gradient");
        send(it->second, prev_rank, tag(true, k));
        grads_out.erase(it);
        break;
      }
      case Op::reduce:
        if (cb.reduce) cb.reduce();
        break;
      case Op::step:
        break;
    }
    if (!sends_.empty()) reap_sends();
  }
  for (PendingSend& s : sends_) s.work->wait();
  sends_.clear();
  TRIDENT_CHECK(stash_.empty() && received_.empty() && grads_in_.empty() && grads_out.empty(),
                "pipeline executor: the instruction list left {} activations stashed and {} transfers unused",
                stash_.size(), received_.size() + grads_in_.size() + grads_out.size());
}

}  // namespace trident::parallel::pipeline
