// Op-table cases for the embedding lookup. Ids are drawn from a vocabulary
// smaller than their count, so rows repeat and the gradient check exercises the
// scatter-add accumulation; both id dtypes and multi-dimensional ids are covered.
#include "op_table.h"
#include "trident/autograd/autograd.h"

namespace trident::testing {
namespace {

namespace ag = trident::autograd;

Tensor reference_embedding(const Tensor& weight, const Tensor& ids) {
  const std::int64_t dim = weight.size(1);
  const auto w = values(weight);
  const auto id = ids.to(DType::i64).to_vector<std::int64_t>();
  std::vector<double> out;
  for (std::int64_t v : id) {
    for (std::int64_t c = 0; c < dim; ++c) out.push_back(w[static_cast<std::size_t>(v * dim + c)]);
  }
  std::vector<std::int64_t> dims = ids.shape().dims();
  dims.push_back(dim);
  return tensor_from(out, Shape(std::move(dims)));
}

OpCase embedding_case(std::string name, std::int64_t vocab, std::int64_t dim, Shape ids_shape, DType id_dtype) {
  OpCase c;
  c.name = std::move(name);
  c.op = ops::Op::embedding;
  c.make_inputs = [=](std::mt19937_64& g) {
    return std::vector<Variable>{param(g, {vocab, dim}), constant(random_ids(g, ids_shape, vocab, id_dtype))};
  };
  c.forward = [](const std::vector<Variable>& in) { return ag::embedding(in[0], in[1].data()); };
  c.reference = [](const std::vector<Tensor>& in) { return reference_embedding(in[0], in[1]); };
  // A gather is exact in every dtype.
  c.dtypes = {{DType::f64, 0.0}, {DType::f32, 0.0}, {DType::bf16, 0.0}};
  return c;
}

std::vector<OpCase> make_embedding_cases() {
  return {
      embedding_case("embedding_i64_ids_2d", 5, 3, {3, 4}, DType::i64),
      embedding_case("embedding_i32_ids", 4, 7, {9}, DType::i32),
      embedding_case("embedding_i32_ids_3d", 6, 5, {2, 2, 3}, DType::i32),
  };
}

TRIDENT_OP_CASES(make_embedding_cases);

}  // namespace
}  // namespace trident::testing
