// Op-table cases for the fused cross-entropy: mean, sum and a global-token
// normalizer, ignored targets (the default -100 and a custom index that is a
// valid class), i32 and i64 targets, 2-D and 3-D logits. The reference is a
// naive f64 log-softmax written here.
#include <cmath>

#include "op_table.h"
#include "trident/autograd/autograd.h"

namespace trident::testing {
namespace {

namespace ag = trident::autograd;

// Loss of logits [..., V] against targets [...] with the given reduction, naively in f64.
Tensor reference_cross_entropy(const Tensor& logits, const Tensor& targets, const ag::CrossEntropyOptions& o) {
  const std::int64_t vocab = logits.shape().last();
  const auto x = values(logits);
  const auto t = targets.to(DType::i64).to_vector<std::int64_t>();
  double total = 0;
  std::int64_t count = 0;
  for (std::size_t r = 0; r < t.size(); ++r) {
    if (t[r] == o.ignore_index) continue;
    const double* row = x.data() + r * static_cast<std::size_t>(vocab);
    double mx = row[0];
    for (std::int64_t j = 1; j < vocab; ++j) mx = std::max(mx, row[j]);
    double sum = 0;
    for (std::int64_t j = 0; j < vocab; ++j) sum += std::exp(row[j] - mx);
    const double log_softmax_target = row[t[r]] - mx - std::log(sum);
    total += -log_softmax_target;
    ++count;
  }
  double loss = total;
  if (o.normalizer > 0) {
    loss = total / o.normalizer;
  } else if (o.reduction == ag::Reduction::mean) {
    loss = count ? total / static_cast<double>(count) : 0.0;
  }
  return tensor_from({loss}, Shape{});
}

OpCase cross_entropy_case(std::string name, Shape logits_shape, DType target_dtype, std::vector<std::size_t> ignored,
                          ag::CrossEntropyOptions options) {
  OpCase c;
  c.name = std::move(name);
  c.op = ops::Op::cross_entropy;
  c.make_inputs = [=](std::mt19937_64& g) {
    const std::int64_t vocab = logits_shape.last();
    std::vector<std::int64_t> lead(logits_shape.dims().begin(), logits_shape.dims().end() - 1);
    Tensor targets = random_ids(g, Shape(lead), vocab, DType::i64);
    auto tv = targets.span<std::int64_t>();
    for (std::size_t i : ignored) tv[i] = options.ignore_index;
    return std::vector<Variable>{param(g, logits_shape, -3.0, 3.0), constant(targets.to(target_dtype))};
  };
  c.forward = [options](const std::vector<Variable>& in) { return ag::cross_entropy(in[0], in[1].data(), options); };
  c.reference = [options](const std::vector<Tensor>& in) { return reference_cross_entropy(in[0], in[1], options); };
  c.dtypes = {{DType::f64, 1e-12}, {DType::f32, 1e-5}, {DType::bf16, 1e-4}};
  return c;
}

std::vector<OpCase> make_loss_cases() {
  using ag::CrossEntropyOptions;
  using ag::Reduction;
  return {
      cross_entropy_case("cross_entropy_mean_ignored", {6, 7}, DType::i64, {1, 4}, CrossEntropyOptions{}),
      cross_entropy_case("cross_entropy_sum_i32", {5, 9}, DType::i32, {2},
                         CrossEntropyOptions{.reduction = Reduction::sum}),
      cross_entropy_case("cross_entropy_normalizer_3d", {2, 3, 5}, DType::i64, {0, 4},
                         CrossEntropyOptions{.normalizer = 11.0}),
      // ignore_index 2 is also a valid class: rows with target 2 must drop out.
      cross_entropy_case("cross_entropy_custom_ignore_index", {7, 4}, DType::i32, {3, 5},
                         CrossEntropyOptions{.ignore_index = 2}),
      cross_entropy_case("cross_entropy_wide_rows", {3, 67}, DType::i64, {}, CrossEntropyOptions{}),
  };
}

TRIDENT_OP_CASES(make_loss_cases);

}  // namespace
}  // namespace trident::testing
