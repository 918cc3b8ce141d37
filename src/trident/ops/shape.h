// Shape ops. reshape is a view; permute, split, concat and slice copy (every
// trident tensor is contiguous). Any dtype. Dimensions may be negative.
#pragma once

#include <vector>

#include "trident/core/tensor.h"

namespace trident::ops {

Tensor reshape(const Tensor& x, Shape shape);
// out.shape[i] = x.shape[dims[i]]; dims is a permutation of 0..rank-1.
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims);
// Swaps two dimensions.
Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1);
// Pieces of the given sizes along `dim` (sizes sum to x.shape[dim]).
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim);
Tensor concat(const std::vector<Tensor>& xs, std::int64_t dim);
// x[..., start:end, ...] along `dim`.
Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end);
// The inverse of slice for gradients: zeros of `shape` with `x` written at [start, start+len) along `dim`.
Tensor slice_backward(const Tensor& x, const Shape& shape, std::int64_t dim, std::int64_t start);

}  // namespace trident::ops
