// Differentiable LayerNorm and RMSNorm over the last dimension (see ops/norm.h
// for shapes, dtypes and numerics). The backward node saves x, weight and the
// per-row statistics (mean/rstd), not the normalised output.
#pragma once

#include "trident/autograd/variable.h"

namespace trident::autograd {

// x [..., C], weight [C], bias [C] or an undefined Variable (no bias).
Variable layer_norm(const Variable& x, const Variable& weight, const Variable& bias, double eps = 1e-5);
// x [..., C], weight [C].
Variable rms_norm(const Variable& x, const Variable& weight, double eps = 1e-6);

}  // namespace trident::autograd
