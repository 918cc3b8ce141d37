// Reverse-mode automatic differentiation: Variables and the tape.
//
// A Variable is a Tensor plus what backward needs: whether it requires a
// gradient, its accumulated gradient (leaves), and the Node that produced it
// (non-leaves). Copies of a Variable share all of this (like a shared_ptr).
//
// Differentiable functions (autograd/functions.h) compute with ops:: on the
// tensors and record a Node whose backward closure holds the saved tensors.
// backward() walks the recorded graph in dependency order, summing gradients
// that meet at a node, and accumulates into leaf gradients. Saved tensors are
// released after backward unless retain_graph is set.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/tensor.h"

namespace trident::autograd {

class Node;
struct VariableImpl;

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor data, bool requires_grad = false);

  bool defined() const noexcept { return impl_ != nullptr; }
  const Tensor& data() const;
  // Replaces the data in place (optimiser steps, loading weights); shape and dtype may not change.
  void set_data(const Tensor& data);
  // Replaces the data with a tensor of any shape (ZeRO-3 swaps a parameter between
  // its gathered full tensor and an empty placeholder). The dtype may not change.
  void reset_data(const Tensor& data);
  // Leaves whose data a kernel wrote in place (optimiser steps, checkpoint
  // loads): drops the compute copy cast_cached() kept of the old values.
  // set_data and reset_data do this themselves.
  void mark_data_changed();
  // Mixed precision's compute weights: the copy of data() in a compute dtype
  // that cast_cached() made, or undefined when data changed since.
  Tensor compute_copy() const;
  // Records `copy` as data() converted to copy's dtype (the optimiser writes
  // it in the same pass as the update, right after mark_data_changed()).
  void set_compute_copy(const Tensor& copy) const;  // a cache: const like the handle
  const Shape& shape() const { return data().shape(); }
  DType dtype() const { return data().dtype(); }
  Device device() const { return data().device(); }
  std::int64_t numel() const { return data().numel(); }

  bool requires_grad() const;
  void set_requires_grad(bool requires_grad);
  bool is_leaf() const;

  // Accumulated gradient of a leaf (undefined until a backward reaches it).
  const Tensor& grad() const;
  // Installs a gradient buffer (e.g. a view into a contiguous bucket); later
  // backward passes add into it in place (the first one after zero_grad()
  // overwrites it).
  void set_grad(const Tensor& grad);
  // Makes the gradient zero, lazily: the buffer is kept, and the next backward
  // writes into it instead of adding (saving a pass over every gradient), or
  // grad() zeroes it if it is read first. Code holding its own alias of the
  // buffer (a bucket) must read it through grad() or zero it itself.
  void zero_grad();

  // Runs backward from this variable. `grad_output` defaults to 1 for a
  // single-element variable and must be given otherwise (pipeline stages pass
  // the gradient received from the next stage).
  void backward(const Tensor& grad_output = {}, bool retain_graph = false) const;

  // A new leaf sharing this data, cut from the graph.
  Variable detach() const;

  // Called on a leaf each time a backward pass has finished accumulating its
  // gradient (once per backward, after all contributions arrived). Data
  // parallelism uses it to launch gradient reductions while backward runs on.
  // Returns a handle for remove_grad_ready_hook: whoever installs a hook that
  // refers to itself removes it before it goes away.
  using GradReadyHook = std::function<void(Variable&)>;
  int add_grad_ready_hook(GradReadyHook hook);
  void remove_grad_ready_hook(int handle);

  const std::string& name() const;
  void set_name(std::string name);

  // Graph plumbing (used by function implementations and the engine).
  const std::shared_ptr<Node>& grad_fn() const;
  int output_nr() const;
  static Variable from_node(Tensor data, std::shared_ptr<Node> node, int output_nr);
  static Variable from_impl(std::shared_ptr<VariableImpl> impl);
  std::shared_ptr<Node> gradient_edge_node() const;  // grad_fn, or the leaf's accumulator
  const std::shared_ptr<VariableImpl>& impl() const { return impl_; }
  bool is_same(const Variable& other) const noexcept { return impl_ == other.impl_; }

 private:
  std::shared_ptr<VariableImpl> impl_;
};

// Runs backward from several roots at once (e.g. the outputs of a recomputed
// segment); grads[i] is the gradient of roots[i] (undefined = ones for scalars).
void backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

// Called by the backward engine after every node it runs (on the thread running
// backward). Data parallelism uses it to drive in-flight gradient reductions —
// MPI progresses non-blocking operations only inside MPI calls. Returns an id for
// remove_backward_progress_hook.
int add_backward_progress_hook(std::function<void()> hook);
void remove_backward_progress_hook(int id);

// --- grad mode ---
bool grad_enabled() noexcept;
class NoGradGuard {
 public:
  NoGradGuard() noexcept;
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
class EnableGradGuard {
 public:
  EnableGradGuard() noexcept;
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace trident::autograd
