#include "trident/ops/shape.h"

#include <algorithm>
#include <numeric>

#include "trident/kernels/cpu/shape.h"
#include "trident/ops/dispatch.h"

namespace trident::ops {

Tensor reshape(const Tensor& x, Shape shape) {
  check_defined(x, "reshape", "x");
  return x.view(std::move(shape));
}

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims) {
  check_defined(x, "permute", "x");
  TRIDENT_CHECK(dims.size() == x.rank(), "permute: {} dims [{}] for a tensor of shape {}", dims.size(),
                fmt::join(dims, ", "), x.shape());
  std::vector<std::size_t> perm;
  std::vector<bool> used(x.rank(), false);
  std::vector<std::int64_t> out_dims;
  for (std::int64_t d : dims) {
    std::size_t a = x.shape().axis(d);
    TRIDENT_CHECK(!used[a], "permute: dims [{}] repeat axis {} (shape {})", fmt::join(dims, ", "), a, x.shape());
    used[a] = true;
    perm.push_back(a);
    out_dims.push_back(x.shape()[a]);
  }
  Tensor out = Tensor::empty(Shape(out_dims), x.dtype(), x.device());
  TRIDENT_KERNEL(x.device(), permute, dtype_size(x.dtype()), x.raw_data(), out.raw_data(), x.shape(), perm);
  return out;
}

Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1) {
  check_defined(x, "transpose", "x");
  std::vector<std::int64_t> dims(x.rank());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[x.shape().axis(dim0)], dims[x.shape().axis(dim1)]);
  return permute(x, dims);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  check_defined(x, "split", "x");
  const std::size_t a = x.shape().axis(dim);
  const std::int64_t total = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
  TRIDENT_CHECK(total == x.shape()[a] && std::all_of(sizes.begin(), sizes.end(), [](auto s) { return s >= 0; }),
                "split: sizes [{}] do not sum to dimension {} of shape {}", fmt::join(sizes, ", "), a, x.shape());
  std::vector<Tensor> out;
  std::int64_t start = 0;
  for (std::int64_t len : sizes) {
    Shape s = x.shape();
    s[a] = len;
    Tensor piece = Tensor::empty(s, x.dtype(), x.device());
    TRIDENT_KERNEL(x.device(), copy_dim_block, dtype_size(x.dtype()), x.raw_data(), x.shape()[a], start,
                   piece.raw_data(), len, 0, x.shape().outer(a), x.shape().inner(a), len);
    out.push_back(std::move(piece));
    start += len;
  }
  return out;
}

Tensor concat(const std::vector<Tensor>& xs, std::int64_t dim) {
  TRIDENT_CHECK(!xs.empty(), "concat: no tensors given");
  for (const Tensor& t : xs) check_defined(t, "concat", "xs[i]");
  const std::size_t a = xs[0].shape().axis(dim);
  std::int64_t total = 0;
  for (const Tensor& t : xs) {
    check_same_dtype(xs[0], t, "concat");
    check_same_device(xs[0], t, "concat");
    bool ok = t.rank() == xs[0].rank();
    for (std::size_t d = 0; ok && d < t.rank(); ++d) ok = d == a || t.shape()[d] == xs[0].shape()[d];
    TRIDENT_CHECK(ok, "concat: shapes {} and {} differ outside dimension {}", xs[0].shape(), t.shape(), a);
    total += t.shape()[a];
  }
  Shape s = xs[0].shape();
  s[a] = total;
  Tensor out = Tensor::empty(s, xs[0].dtype(), xs[0].device());
  std::int64_t start = 0;
  for (const Tensor& t : xs) {
    const std::int64_t len = t.shape()[a];
    TRIDENT_KERNEL(out.device(), copy_dim_block, dtype_size(t.dtype()), t.raw_data(), len, 0, out.raw_data(), total,
                   start, s.outer(a), s.inner(a), len);
    start += len;
  }
  return out;
}

Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end) {
  check_defined(x, "slice", "x");
  const std::size_t a = x.shape().axis(dim);
  TRIDENT_CHECK(0 <= start && start <= end && end <= x.shape()[a],
                "slice: range [{}, {}) out of bounds for dimension {} of shape {}", start, end, a, x.shape());
  Shape s = x.shape();
  s[a] = end - start;
  Tensor out = Tensor::empty(s, x.dtype(), x.device());
  TRIDENT_KERNEL(x.device(), copy_dim_block, dtype_size(x.dtype()), x.raw_data(), x.shape()[a], start,
                 out.raw_data(), s[a], 0, x.shape().outer(a), x.shape().inner(a), s[a]);
  return out;
}

Tensor slice_backward(const Tensor& x, const Shape& shape, std::int64_t dim, std::int64_t start) {
  check_defined(x, "slice_backward", "x");
  const std::size_t a = shape.axis(dim);
  TRIDENT_CHECK(x.rank() == shape.rank() && start >= 0 && start + x.shape()[a] <= shape[a],
                "slice_backward: piece {} at {} does not fit dimension {} of {}", x.shape(), start, a, shape);
  Tensor out = Tensor::zeros(shape, x.dtype(), x.device());
  TRIDENT_KERNEL(x.device(), copy_dim_block, dtype_size(x.dtype()), x.raw_data(), x.shape()[a], 0, out.raw_data(),
                 shape[a], start, shape.outer(a), shape.inner(a), x.shape()[a]);
  return out;
}

}  // namespace trident::ops
