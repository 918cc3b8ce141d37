// Differentiable embedding lookup (see ops/embedding.h for shapes and errors).
#pragma once

#include "trident/autograd/variable.h"

namespace trident::autograd {

// weight [V, D], ids [...] (i32/i64, no gradient) -> [..., D]. The gradient of
// weight is the deterministic scatter-add of ops::embedding_backward. `vocab`:
// as ops::embedding's (ids below it; 0: below V).
Variable embedding(const Variable& weight, const Tensor& ids, std::int64_t vocab = 0);

}  // namespace trident::autograd
