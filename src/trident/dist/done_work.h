// The Work of an operation that finished before its call returned: what a communicator hands back for
// a blocking call (MpiCommunicator) or for one with nothing to wait for (SelfCommunicator).
#pragma once

#include <string>

#include "trident/dist/communicator.h"

namespace trident::dist {

class DoneWork final : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
  std::string error() const override { return ""; }
};

}  // namespace trident::dist
