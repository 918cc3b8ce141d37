// Device dispatch helpers shared by the ops:: implementations.
#pragma once

#include <initializer_list>
#include <string_view>

#include "trident/core/tensor.h"

namespace trident::ops {

// Every ops:: entry point validates its arguments, then runs the kernel of the
// tensors' device. Until the CUDA backend provides a kernel for an op, a CUDA
// tensor reaching it is a clear error naming the op.
inline void require_cpu(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined()) {
      TRIDENT_CHECK(t->device().is_cpu(), "{}: no kernel for device {} in this build (tensor {})", op, t->device(),
                    t->describe());
    }
  }
}

}  // namespace trident::ops
