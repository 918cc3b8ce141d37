// Op-table cases for the norm family: LayerNorm (with and without bias) and RMSNorm.
#include <cmath>

#include "op_table.h"
#include "trident/autograd/autograd.h"

namespace trident::testing {
namespace {

namespace ag = trident::autograd;
using ops::Op;

// Naive f64 LayerNorm over the last dimension; `bias` may be undefined.
Tensor reference_layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const auto xv = values(x), w = values(weight);
  const auto b = bias.defined() ? values(bias) : std::vector<double>(w.size(), 0.0);
  const std::size_t cols = w.size(), rows = xv.size() / cols;
  std::vector<double> y(xv.size());
  for (std::size_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (std::size_t c = 0; c < cols; ++c) mean += xv[r * cols + c];
    mean /= static_cast<double>(cols);
    for (std::size_t c = 0; c < cols; ++c) var += (xv[r * cols + c] - mean) * (xv[r * cols + c] - mean);
    var /= static_cast<double>(cols);
    for (std::size_t c = 0; c < cols; ++c) y[r * cols + c] = (xv[r * cols + c] - mean) / std::sqrt(var + eps) * w[c] + b[c];
  }
  return tensor_from(y, x.shape());
}

Tensor reference_rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const auto xv = values(x), w = values(weight);
  const std::size_t cols = w.size(), rows = xv.size() / cols;
  std::vector<double> y(xv.size());
  for (std::size_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (std::size_t c = 0; c < cols; ++c) ms += xv[r * cols + c] * xv[r * cols + c];
    ms /= static_cast<double>(cols);
    for (std::size_t c = 0; c < cols; ++c) y[r * cols + c] = xv[r * cols + c] / std::sqrt(ms + eps) * w[c];
  }
  return tensor_from(y, x.shape());
}

OpCase layer_norm_case(std::string name, Shape x_shape, bool with_bias, double eps) {
  const std::int64_t cols = x_shape[x_shape.rank() - 1];
  OpCase c{std::move(name), Op::layer_norm,
           [x_shape, cols, with_bias](std::mt19937_64& g) {
             // An offset and a spread in x, so mean subtraction and scaling both matter.
             std::vector<Variable> in{param(g, x_shape, -1.5, 2.5), param(g, {cols}, 0.5, 1.5)};
             if (with_bias) in.push_back(param(g, {cols}));
             return in;
           },
           [eps, with_bias](const std::vector<Variable>& in) {
             return ag::layer_norm(in[0], in[1], with_bias ? in[2] : Variable(), eps);
           },
           [eps, with_bias](const std::vector<Tensor>& in) {
             return reference_layer_norm(in[0], in[1], with_bias ? in[2] : Tensor(), eps);
           }};
  c.dtypes.push_back({DType::bf16, 1e-2});
  c.dtypes.push_back({DType::f16, 2e-3});
  return c;
}

OpCase rms_norm_case(std::string name, Shape x_shape, double eps) {
  const std::int64_t cols = x_shape[x_shape.rank() - 1];
  OpCase c{std::move(name), Op::rms_norm,
           [x_shape, cols](std::mt19937_64& g) {
             return std::vector<Variable>{param(g, x_shape, -2.0, 1.5), param(g, {cols}, 0.5, 1.5)};
           },
           [eps](const std::vector<Variable>& in) { return ag::rms_norm(in[0], in[1], eps); },
           [eps](const std::vector<Tensor>& in) { return reference_rms_norm(in[0], in[1], eps); }};
  c.dtypes.push_back({DType::bf16, 1e-2});
  c.dtypes.push_back({DType::f16, 2e-3});
  return c;
}

std::vector<OpCase> make_norm_cases() {
  std::vector<OpCase> cases;
  cases.push_back(layer_norm_case("layer_norm_bias", {3, 5, 7}, true, 1e-5));
  cases.push_back(layer_norm_case("layer_norm_no_bias", {4, 9}, false, 1e-5));
  // More than 16 columns: the lane-parallel row sums take both their full and their tail path.
  cases.push_back(layer_norm_case("layer_norm_bias_wide", {2, 37}, true, 1e-3));
  cases.push_back(layer_norm_case("layer_norm_one_row", {19}, true, 1e-5));
  cases.push_back(rms_norm_case("rms_norm", {3, 11}, 1e-6));
  cases.push_back(rms_norm_case("rms_norm_wide_3d", {2, 3, 35}, 1e-5));
  return cases;
}

TRIDENT_OP_CASES(make_norm_cases);

}  // namespace
}  // namespace trident::testing
