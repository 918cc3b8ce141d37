// Reductions. Results keep the input dtype; accumulation is in f64 with a
// fixed order, so the result does not depend on the thread count.
#pragma once

#include "trident/core/tensor.h"

namespace trident::ops {

Tensor sum(const Tensor& x);   // shape []
Tensor mean(const Tensor& x);  // shape []
// Sum over every dimension but the last: [..., C] -> [C] (the bias gradient).
Tensor sum_to_last_dim(const Tensor& x);

}  // namespace trident::ops
