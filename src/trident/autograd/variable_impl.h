// Internal state shared by copies of a Variable (autograd-internal header).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trident/autograd/function.h"
#include "trident/autograd/variable.h"

namespace trident::autograd {

struct VariableImpl {
  Tensor data;
  Tensor grad;
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  int output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;  // leaves: shared by every use in live graphs
  std::vector<std::pair<int, Variable::GradReadyHook>> hooks;  // (handle, hook)
  int next_hook = 0;
  std::string name;
  // Set by cast() of a leaf: the leaf this variable is a compute-dtype copy of,
  // into whose .grad a fused consumer may add this variable's gradient
  // (WeightGradSink).
  std::weak_ptr<VariableImpl> cast_of;
  // Leaves: data converted to a compute dtype (cast_cached), valid while
  // copy_version == version; version changes with every change of data.
  Tensor compute_copy;
  std::uint64_t version = 1, copy_version = 0;
  // Leaves: a WeightGradSink added to .grad during the running backward, so
  // AccumulateGrad fires the hooks even when no gradient reaches it.
  bool grad_written_in_place = false;
  // Leaves: zero_grad() left .grad's old values in place; they count as zeros.
  // The next writer overwrites instead of adding, and grad() zeroes the buffer
  // if it is read first (so the buffer is not cleared and then overwritten).
  bool grad_stale = false;
};

// Adds a leaf's incoming gradient into its .grad and fires its hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<VariableImpl>& leaf);
  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override;
  void release() override {}
  // The backward failed before this node ran: forgets the leaf's in-place mark.
  void abandon() noexcept;

 private:
  std::weak_ptr<VariableImpl> leaf_;
};

}  // namespace trident::autograd
