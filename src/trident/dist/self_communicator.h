// The communicator of a group of one: every collective is a local copy (or
// nothing). A single process runs the same distributed code paths through it
// (ZeRO on one rank, checkpoint barriers) without starting MPI.
#pragma once

#include <memory>

#include "trident/dist/communicator.h"

namespace trident::dist {

std::shared_ptr<Communicator> self_communicator();

}  // namespace trident::dist
