// ParameterGatherer: how a module asks for parameters that are not resident.
//
// Under ZeRO-3 a rank keeps only its shard of each parameter. Before a unit of
// the model (the embeddings, a transformer block, the head) runs — in forward,
// and again when its activations are recomputed in backward — the unit's
// parameters are gathered into full tensors, and released right after.
#pragma once

#include <vector>

#include "trident/nn/module.h"

namespace trident::nn {

class ParameterGatherer {
 public:
  virtual ~ParameterGatherer() = default;
  virtual void gather(const std::vector<Parameter*>& params) = 0;
  virtual void release(const std::vector<Parameter*>& params) = 0;
};

// RAII: gathers on construction, releases on destruction (no-op without a gatherer).
class GatheredScope {
 public:
  GatheredScope(ParameterGatherer* gatherer, std::vector<Parameter*> params)
      : gatherer_(gatherer), params_(std::move(params)) {
    if (gatherer_) gatherer_->gather(params_);
  }
  ~GatheredScope() {
    if (gatherer_) gatherer_->release(params_);
  }
  GatheredScope(const GatheredScope&) = delete;
  GatheredScope& operator=(const GatheredScope&) = delete;

 private:
  ParameterGatherer* gatherer_;
  std::vector<Parameter*> params_;
};

}  // namespace trident::nn
