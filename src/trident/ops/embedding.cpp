#include "trident/ops/embedding.h"

#include <string>
#include <vector>

#include "trident/kernels/cpu/embedding.h"
#include "trident/ops/dispatch.h"

namespace trident::ops {

namespace {
// "[1, 3]": the multi-index of flat position `flat` in `shape`.
std::string position_in(const Shape& shape, std::int64_t flat) {
  std::vector<std::int64_t> idx(shape.rank());
  for (std::size_t d = shape.rank(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return Shape(std::move(idx)).to_string();
}

void check_ids(const Tensor& ids, std::int64_t vocab, std::string_view op) {
  TRIDENT_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64,
                "{}: ids must be i32 or i64, got {} (shape {})", op, ids.dtype(), ids.shape());
  std::int64_t bad_id = 0;
  const std::int64_t at =
      TRIDENT_KERNEL(ids.device(), find_invalid_id, ids.dtype(), ids.raw_data(), ids.numel(), vocab, &bad_id);
  TRIDENT_CHECK(at < 0, "{}: id {} at position {} of ids {} is outside the vocabulary [0, {})", op, bad_id,
                position_in(ids.shape(), at < 0 ? 0 : at), ids.shape(), vocab);
}
}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids, std::int64_t vocab) {
  check_defined(weight, "embedding", "weight");
  check_defined(ids, "embedding", "ids");
  check_rank(weight, 2, "embedding", "weight");
  check_floating(weight, "embedding", "weight");
  check_same_device(weight, ids, "embedding");
  const std::int64_t rows = weight.size(0), dim = weight.size(1);
  TRIDENT_CHECK(vocab >= 0 && vocab <= rows, "embedding: vocab {} must be in [0, {}] (0: the weight's rows)", vocab,
                rows);
  check_ids(ids, vocab > 0 ? vocab : rows, "embedding");
  std::vector<std::int64_t> out_dims = ids.shape().dims();
  out_dims.push_back(dim);
  Tensor out = Tensor::empty(Shape(std::move(out_dims)), weight.dtype(), weight.device());
  TRIDENT_KERNEL(weight.device(), embedding_forward, weight.dtype(), ids.dtype(), weight.raw_data(), ids.raw_data(),
                 out.raw_data(), ids.numel(), dim);
  return out;
}

void embedding_backward_into(const Tensor& dout, const Tensor& ids, Tensor& dweight, bool accumulate) {
  check_defined(dout, "embedding_backward", "dout");
  check_defined(ids, "embedding_backward", "ids");
  check_defined(dweight, "embedding_backward", "dweight");
  check_floating(dout, "embedding_backward", "dout");
  TRIDENT_CHECK(dout.rank() == ids.rank() + 1 &&
                    std::equal(ids.shape().begin(), ids.shape().end(), dout.shape().begin()),
                "embedding_backward: dout of shape {} does not match ids of shape {} (expected [..ids, D])",
                dout.shape(), ids.shape());
  const std::int64_t dim = dout.size(-1);
  TRIDENT_CHECK(dweight.rank() == 2 && dweight.size(1) == dim,
                "embedding_backward: dweight {} must be [vocab, {}] for dout {}", dweight.shape(), dim,
                dout.shape());
  const bool half = dout.dtype() == DType::bf16 || dout.dtype() == DType::f16;
  TRIDENT_CHECK(dweight.dtype() == dout.dtype() || (half && dweight.dtype() == DType::f32),
                "embedding_backward: dweight is {} but dout {} is {} (expected {}{})", dweight.dtype(), dout.shape(),
                dout.dtype(), dout.dtype(), half ? " or f32" : "");
  check_same_device(dout, ids, "embedding_backward");
  check_same_device(dout, dweight, "embedding_backward");
  const std::int64_t vocab = dweight.size(0);
  check_ids(ids, vocab, "embedding_backward");
  TRIDENT_KERNEL(dout.device(), embedding_backward, dout.dtype(), dweight.dtype(), ids.dtype(), dout.raw_data(),
                 ids.raw_data(), dweight.raw_data(), ids.numel(), vocab, dim, accumulate);
}

Tensor embedding_backward(const Tensor& dout, const Tensor& ids, std::int64_t vocab) {
  check_defined(dout, "embedding_backward", "dout");
  TRIDENT_CHECK(vocab >= 0, "embedding_backward: negative vocabulary size {}", vocab);
  Tensor dweight = Tensor::empty(Shape{vocab, dout.rank() > 0 ? dout.size(-1) : 0}, dout.dtype(), dout.device());
  embedding_backward_into(dout, ids, dweight, false);
  return dweight;
}

}  // namespace trident::ops
