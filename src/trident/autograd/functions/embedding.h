// Differentiable embedding lookup (see ops/embedding.h for shapes and errors).
#pragma once

#include "trident/autograd/variable.h"

namespace trident::autograd {

// weight [V, D], ids [...] (i32/i64, no gradient) -> [..., D]. The gradient of
// weight is the deterministic scatter-add of ops::embedding_backward.
Variable embedding(const Variable& weight, const Tensor& ids);

}  // namespace trident::autograd
