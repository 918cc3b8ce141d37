// Activation recomputation ("activation checkpointing").
//
// checkpoint(fn, inputs) runs fn without recording its graph (so none of its
// intermediate activations stay alive) and records one node. In backward, that
// node re-runs fn with grad enabled on the saved inputs and back-propagates
// through the fresh graph. fn must be deterministic (trident's dropout is,
// being counter-based), so the gradients equal the non-checkpointed ones bit
// for bit. Parameters used inside fn receive their gradients during that
// inner backward.
#pragma once

#include <functional>
#include <vector>

#include "trident/autograd/variable.h"

namespace trident::autograd {

using SegmentFn = std::function<std::vector<Variable>(const std::vector<Variable>&)>;

// Called around the segment's forward and around its recomputation together
// with the backward through it (ZeRO-3 gathers the segment's parameters there).
struct SegmentHooks {
  std::function<void()> enter;
  std::function<void()> exit;
};

std::vector<Variable> checkpoint(const SegmentFn& fn, const std::vector<Variable>& inputs,
                                 const SegmentHooks& hooks = {});

}  // namespace trident::autograd
