// Host side of the CUDA dropout: the local tensor's place in the global one
// (GlobalSlice) becomes rows of consecutive global indices (dropout_launch.h).
// Size-1 axes are dropped and an axis is merged into the next one out when the
// local extent of the inner one is its whole global extent, so an unsharded
// tensor is a single row. The threshold is the CPU kernel's, to the bit.
#include "trident/kernels/cuda/dropout.h"

#include <vector>

#include "trident/core/error.h"
#include "trident/kernels/cuda/dropout_launch.h"
#include "trident/kernels/dropout_rule.h"

namespace trident::kernels::cuda {

void dropout(DType dtype, const void* x, void* y, const Shape& local, double p, const CounterRng& rng,
             const GlobalSlice& slice) {
  const std::int64_t n = local.numel();
  if (n == 0) return;
  const std::size_t r = local.rank();
  // Global strides and the global index of local element 0.
  std::vector<std::int64_t> global_strides(r, 1);
  std::int64_t base = 0;
  if (!slice.empty()) {
    for (std::size_t d = r; d-- > 1;) global_strides[d - 1] = global_strides[d] * slice.global_shape[d];
    for (std::size_t d = 0; d < r; ++d) base += slice.offsets[d] * global_strides[d];
  } else {
    for (std::size_t d = r; d-- > 1;) global_strides[d - 1] = global_strides[d] * local[d];
  }
  std::vector<std::int64_t> dims, strides;
  for (std::size_t d = 0; d < r; ++d) {
    if (local[d] == 1) continue;
    if (!strides.empty() && strides.back() == global_strides[d] * local[d]) {
      dims.back() *= local[d];
      strides.back() = global_strides[d];
    } else {
      dims.push_back(local[d]);
      strides.push_back(global_strides[d]);
    }
  }
  if (dims.empty() || strides.back() != 1) {  // rows must run along consecutive global indices
    dims.push_back(1);
    strides.push_back(1);
  }
  TRIDENT_CHECK(dims.size() <= static_cast<std::size_t>(detail::kMaxDropoutDims),
                "CUDA dropout: local shape {} in global shape {} has {} axes that do not merge; at most {} are supported",
                local, slice.global_shape, dims.size(), detail::kMaxDropoutDims);
  detail::DropoutPlan plan;
  plan.rank = static_cast<int>(dims.size());
  for (std::size_t k = 0; k < dims.size(); ++k) {
    plan.dims[k] = dims[k];
    plan.global_strides[k] = strides[k];
  }
  plan.base = base;
  plan.row = dims.back();
  plan.rows = n / plan.row;
  plan.seed = rng.seed();
  plan.stream = rng.stream();
  // As the CPU kernel (kernels/dropout_rule.h).
  const DropRule rule = drop_rule(p);
  plan.drop_all = rule.drop_all;
  plan.threshold = rule.threshold;
  plan.scale = rule.scale;
  detail::launch_dropout(dtype, x, y, plan);
}

}  // namespace trident::kernels::cuda
