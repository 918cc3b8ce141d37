#include "op_table.h"

namespace trident::testing {

std::vector<OpCase>& op_cases() {
  static std::vector<OpCase> cases;
  return cases;
}

Tensor random_tensor(std::mt19937_64& gen, Shape shape, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::empty(std::move(shape), DType::f64);
  for (double& x : t.span<double>()) x = dist(gen);
  return t;
}

Tensor random_ids(std::mt19937_64& gen, Shape shape, std::int64_t bound, DType dtype) {
  std::uniform_int_distribution<std::int64_t> dist(0, bound - 1);
  Tensor t = Tensor::empty(std::move(shape), DType::i64);
  for (auto& x : t.span<std::int64_t>()) x = dist(gen);
  return t.to(dtype);
}

Variable param(std::mt19937_64& gen, Shape shape, double lo, double hi) {
  return Variable(random_tensor(gen, std::move(shape), lo, hi), true);
}

Variable constant(Tensor t) { return Variable(std::move(t), false); }

std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

Tensor tensor_from(const std::vector<double>& v, Shape shape) { return Tensor::from_vector<double>(v, std::move(shape)); }

}  // namespace trident::testing
