// Group: one parallel dimension's process group as a layer holds it — this rank's communicator over
// the ranks of one dist::GroupKind (dist/mesh.h), or none when the dimension is absent. The per-module
// views of the layout are Groups: nn::TensorParallel (with its sequence-parallel flag), nn::ExpertParallel,
// and the fields of models::ModelParallel; train::ParallelGroups::layer_group makes them from a job's
// groups.
#pragma once

#include <memory>
#include <utility>

#include "trident/dist/communicator.h"

namespace trident::dist {

struct Group {
  Group() = default;
  Group(std::shared_ptr<Communicator> communicator) : group(std::move(communicator)) {}  // NOLINT: implicit

  std::shared_ptr<Communicator> group;  // null: one rank, nothing to exchange

  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  bool active() const { return size() > 1; }
};

}  // namespace trident::dist
